"""The reward model's heads and how they are fitted and judged, on cached backbone features.

A head maps a response chunk's backbone feature to a score; training minimises the pairwise
preference loss of the seed paper (section 2.1.3) over (chosen, rejected) chunk pairs, with an
L2 penalty chosen by cross-validation (`select_l2`). `evaluate` and `intervals` give held-out
preference accuracy with bootstrap intervals; `by_task` and `by_length` split it. The pipeline
that makes the features and writes the checkpoint is `harness.training.reward`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from harness.errors import UserError
from harness.metrics.quality import ratio_ci


def preference_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> torch.Tensor:
    """Mean pairwise (Bradley-Terry) loss: -log sigmoid(r(x, y_w) - r(x, y_l)).

    y_w is large's chunk (chosen), y_l small's (rejected), r the score at the chunk's last token.
    The paper (§2.1.3) prints L = log sigma(r_w - r_l) without the minus sign; minimized as
    printed it would push chosen scores *below* rejected ones. The sign here is the standard one
    (Ouyang et al. 2022; Zheng et al. 2023), which the paper's "lower loss is better" implies.
    Example: equal scores give log 2 = 0.693 per pair.
    """
    return pair_losses(r_chosen, r_rejected).mean()


def pair_losses(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> torch.Tensor:
    """`preference_loss` of each pair, not averaged."""
    return torch.nn.functional.softplus(r_rejected - r_chosen)


@dataclass(frozen=True)
class Pairs:
    """Chunk pairs as frozen-backbone features (one row per pair)."""

    chosen: torch.Tensor  # [N, H] backbone output at the last token of large's chunk
    rejected: torch.Tensor  # [N, H] the same for small's chunk
    length: torch.Tensor  # [N] chunk length in tokens
    prompt: tuple[str, ...]  # [N] id of the prompt the pair came from

    def select(self, mask: torch.Tensor) -> Pairs:
        idx = torch.nonzero(mask).flatten()
        return Pairs(
            self.chosen[idx],
            self.rejected[idx],
            self.length[idx],
            tuple(self.prompt[i] for i in idx.tolist()),
        )

    def __len__(self) -> int:
        return len(self.length)


@dataclass(frozen=True)
class TrainConfig:
    """Head training settings: Adam on the pairwise loss plus an L2 penalty, in minibatches."""

    epochs: int = 200  # passes over the training pairs
    lr: float = 1e-2  # Adam learning rate
    l2: float = 0.3  # penalty l2 * |w|^2 on the head in standardized-feature units
    batch_size: int = 64  # pairs per step
    seed: int = 0  # shuffling: epoch e uses a generator seeded with seed + e
    head: str = "linear"  # "linear" (the paper's) or "mlp" (harness.backends.reward_model.HEADS)


L2_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)  # searched by `select_l2` when --l2 is not given


L2_EXTEND = 4  # values `select_l2` may add past either end of the grid while that end is best


def l2_search(grid) -> dict:
    """How --l2 was chosen (kept with the choice: a resumed run reuses only the same search)."""
    return {"grid": list(grid), "extend_ends": L2_EXTEND, "criterion": "cv preference accuracy"}


# The MLP head: its penalty sums ~230k squared weights (the linear head's, 896), a smaller
# learning rate, fewer epochs (each costs ~500x the linear head's)
HEAD_DEFAULTS = {
    "linear": {"lr": 1e-2, "epochs": 200, "l2_grid": L2_GRID},
    "mlp": {"lr": 1e-3, "epochs": 40, "l2_grid": (1e-5, 1e-4, 1e-3, 1e-2)},
}


def score(head, x: torch.Tensor) -> torch.Tensor:
    """[N, H] features -> [N] rewards, for a linear head's weight [H] or a head module."""
    if isinstance(head, torch.Tensor):
        return x @ head
    with torch.no_grad():
        return head(x).squeeze(-1)


def state_head(state: dict):
    """The head a training state holds, applicable to raw features: a linear head's weight
    [H], or the MLP as a module (its first layer folds in the feature scale)."""
    if "head" in state:
        return state["head"]
    from harness.backends.reward_model import make_head

    head = make_head(state["head_state"]["0.weight"].shape[1], "mlp")
    head.load_state_dict(state["head_state"])
    return head.eval()


def evaluate(w, pairs: Pairs, ci: bool = False) -> dict:
    """Loss, preference accuracy and mean scores of a head `w` ([H] weight or module) on `pairs`;
    with `ci`, also their 95% intervals (`intervals`).

    accuracy = share of pairs with r_w > r_l, a tie counting one half (so an untrained, all-zero
    head scores 0.5, chance)."""
    if len(pairs) == 0:
        nan = math.nan
        out = {"n": 0, "loss": nan, "acc": nan, "chosen_mean": nan, "rejected_mean": nan}
        return out | ({"n_prompts": 0, "loss_ci": [nan] * 2, "acc_ci": [nan] * 2} if ci else {})
    with torch.no_grad():
        rw, rl = score(w, pairs.chosen), score(w, pairs.rejected)
        per_pair = {
            "loss": pair_losses(rw, rl),
            "acc": (rw > rl).float() + 0.5 * (rw == rl).float(),
        }
    out = {
        "n": len(pairs),
        "loss": float(per_pair["loss"].mean()),
        "acc": float(per_pair["acc"].mean()),
        "chosen_mean": float(rw.mean()),
        "rejected_mean": float(rl.mean()),
    }
    return out | (intervals(pairs.prompt, per_pair) if ci else {})


def intervals(prompt: tuple[str, ...], per_pair: dict, n_boot: int = 2000) -> dict:
    """95% bootstrap intervals of the means of `per_pair`'s values ({name: [N] tensor}, one
    value per pair), prompts resampled with all their pairs (the pairs of one response share its
    prompt and its prefix, so they are not independent): {"n_prompts", "<name>_ci", ...}."""
    prompts = {p: i for i, p in enumerate(sorted(set(prompt)))}
    at = torch.tensor([prompts[p] for p in prompt])
    count = torch.zeros(len(prompts)).index_add_(0, at, torch.ones(len(prompt)))
    out = {"n_prompts": len(prompts)}
    for k, v in per_pair.items():
        total = torch.zeros(len(prompts)).index_add_(0, at, v.float())
        out[f"{k}_ci"] = list(ratio_ci(total.tolist(), count.tolist(), n_boot=n_boot))
    return out


def feature_scale(pairs: Pairs) -> torch.Tensor:
    """[H] standard deviation of every feature over the pairs' chosen and rejected rows.

    Backbone outputs have a few dimensions hundreds of times larger than the rest; dividing by
    this scale makes one L2 penalty mean the same for every dimension. The trained head is
    w / scale, so the reward model itself is still one linear layer on the backbone output."""
    return torch.cat([pairs.chosen, pairs.rejected]).std(0).clamp_min(1e-6)


def train_head(train: Pairs, cfg: TrainConfig, state: dict | None = None, on_epoch=None):
    """Fit the head on `train`; returns the final state (epoch, w, head = w / scale, optimizer;
    for an MLP head see `train_mlp_head`). `state` resumes a saved run; `on_epoch(state)` is
    called after every epoch (progress, periodic checkpoints)."""
    if cfg.head == "mlp":
        return train_mlp_head(train, cfg, state, on_epoch)
    scale = feature_scale(train)
    w = torch.zeros(train.chosen.shape[1], requires_grad=True)
    opt = torch.optim.Adam([w], lr=cfg.lr)
    start = 0
    if state is not None:
        with torch.no_grad():
            w.copy_(state["w"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"]
    return _epochs(
        train,
        scale,
        cfg,
        start,
        on_epoch,
        score=lambda x: x @ w,
        penalty=lambda: (w * w).sum(),
        opt=opt,
        snapshot=lambda epoch: _state(epoch, w, scale, opt),
    )


def train_mlp_head(train: Pairs, cfg: TrainConfig, state: dict | None = None, on_epoch=None):
    """`train_head` for the MLP head (harness.backends.reward_model.make_head "mlp") on standardized features,
    L2 penalty `cfg.l2` on its weight matrices. State: epoch, params (standardized units),
    head_state (the feature scale folded into the first layer: it reads raw features),
    optimizer."""
    from harness.backends.reward_model import make_head

    scale = feature_scale(train)
    torch.manual_seed(cfg.seed)
    net = make_head(train.chosen.shape[1], "mlp")
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    start = 0
    if state is not None:
        net.load_state_dict(state["params"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"]
    return _epochs(
        train,
        scale,
        cfg,
        start,
        on_epoch,
        score=lambda x: net(x).squeeze(-1),
        penalty=lambda: net[0].weight.pow(2).sum() + net[2].weight.pow(2).sum(),
        opt=opt,
        snapshot=lambda epoch: _mlp_state(epoch, net, scale, opt),
    )


def _epochs(
    train: Pairs, scale, cfg: TrainConfig, start: int, on_epoch, *, score, penalty, opt, snapshot
) -> dict:
    """The minibatch loop both heads share: epochs start..cfg.epochs of Adam on the pairwise
    loss of `score` over standardized features plus cfg.l2 * penalty(); epoch e shuffles with
    seed cfg.seed + e; `snapshot(epoch)` is the state after an epoch, passed to `on_epoch`."""
    xw, xl = train.chosen / scale, train.rejected / scale
    state = None
    for epoch in range(start, cfg.epochs):
        order = torch.randperm(
            len(train), generator=torch.Generator().manual_seed(cfg.seed + epoch)
        )
        for i in range(0, len(train), cfg.batch_size):
            idx = order[i : i + cfg.batch_size]
            loss = preference_loss(score(xw[idx]), score(xl[idx])) + cfg.l2 * penalty()
            opt.zero_grad()
            loss.backward()
            opt.step()
        state = snapshot(epoch + 1)
        if on_epoch is not None:
            on_epoch(state)
    return state or snapshot(start)


def _mlp_state(epoch: int, net, scale: torch.Tensor, opt) -> dict:
    params = {k: v.detach().clone() for k, v in net.state_dict().items()}
    folded = dict(params)
    folded["0.weight"] = params["0.weight"] / scale  # W (x / scale) = (W / scale) x
    return {"epoch": epoch, "params": params, "head_state": folded, "optimizer": _copy(opt)}


def _state(epoch: int, w: torch.Tensor, scale: torch.Tensor, opt) -> dict:
    w = w.detach().clone()
    return {"epoch": epoch, "w": w, "head": w / scale, "optimizer": _copy(opt)}


def select_l2(
    train: Pairs, cfg: TrainConfig, grid=L2_GRID, folds: int = 5, extend: int = L2_EXTEND
) -> tuple[float, dict]:
    """The L2 penalty with the best cross-validated preference accuracy (ties: the lower loss),
    and {penalty: {"acc", "loss"}} for every candidate.

    Accuracy, not loss: the issue chooses heads by preference accuracy, and the router uses only
    the head's ranking of tokens (a quantile threshold), not its calibration (docs/
    docs/trained-routers.md: the CV-loss choice ranked held-out pairs worse). Folds group pairs by prompt
    (chunks of one response pair never straddle a fold) and use only `train`, so the held-out
    prompts stay unseen until the final report. Each candidate's figures are printed as found."""
    import random

    prompts = sorted(set(train.prompt))
    random.Random(cfg.seed).shuffle(prompts)
    k = min(folds, len(prompts))
    fold = {p: i % k for i, p in enumerate(prompts)}
    of = torch.tensor([fold[p] for p in train.prompt])

    def cv(l2: float) -> dict:
        right = total = 0.0
        for i in range(k):
            w = state_head(train_head(train.select(of != i), replace(cfg, l2=l2)))
            e = evaluate(w, train.select(of == i))
            right, total = right + e["acc"] * e["n"], total + e["loss"] * e["n"]
        out = {"acc": right / len(train), "loss": total / len(train)}
        print(f"  cv at --l2 {l2:g}: accuracy {out['acc']:.4f}, loss {out['loss']:.4f}", flush=True)
        return out

    table = grow_grid(grid, cv, key=lambda v: (v["acc"], -v["loss"]), extend=extend)
    return max(table, key=lambda g: (table[g]["acc"], -table[g]["loss"])), table


def grow_grid(grid, measure, key, extend: int) -> dict:
    """{value: measure(value)} over `grid` (positive, sorted in the result), and while the best
    (highest `key`) is the grid's largest or smallest value (the best may lie beyond it), over one
    more value past that end at the ratio of its last step, `extend` more at most at each end."""
    table = {g: measure(g) for g in sorted(grid)}
    room = {"up": extend, "down": extend}
    while len(table) > 1:
        values = sorted(table)
        best = max(values, key=lambda g: key(table[g]))
        if best == values[-1] and room["up"]:
            room["up"] -= 1
            new = values[-1] * values[-1] / values[-2]
        elif best == values[0] and room["down"]:
            room["down"] -= 1
            new = values[0] * values[0] / values[1]
        else:
            break
        new = float(f"{new:.3g}")
        table[new] = measure(new)
    return dict(sorted(table.items()))


def _copy(opt) -> dict:
    """The optimizer's state, detached from the live tensors that later steps update in place."""
    import copy

    return copy.deepcopy(opt.state_dict())


def by_task(w: torch.Tensor, pairs: Pairs) -> dict:
    """Loss and preference accuracy per task (a prompt id's first part: "gsm8k/test/12"), with
    their prompt-resampled 95% intervals."""
    tasks = [p.split("/")[0] for p in pairs.prompt]
    out = {}
    for t in sorted(set(tasks)):
        sel = pairs.select(torch.tensor([x == t for x in tasks]))
        keep = ("n", "loss", "acc", "n_prompts", "loss_ci", "acc_ci")
        out[t] = {k: v for k, v in evaluate(w, sel, ci=True).items() if k in keep}
    return out


def by_length(w: torch.Tensor, pairs: Pairs, edges=(1, 2, 5, 17, 10**9)) -> dict:
    """Preference accuracy per chunk-length bucket [edges[i], edges[i+1])."""
    out = {}
    for lo, hi in zip(edges, edges[1:], strict=False):
        sel = pairs.select((pairs.length >= lo) & (pairs.length < hi))
        label = f"{lo}" if hi == lo + 1 else f"{lo}+" if hi >= 10**9 else f"{lo}-{hi - 1}"
        out[label] = {k: evaluate(w, sel)[k] for k in ("n", "acc")}
    return out


def heldout_split(pairs: Pairs, holdout: float, seed: int) -> tuple[Pairs, Pairs]:
    """(train, held-out) by prompt id: a prompt is held out when its salted hash < holdout.

    Salted because the task splits hash (seed, id) too and every prompt here is from a train
    split: unsalted, the held-out set would be the prompts with the smallest task-split hashes."""
    from tasks.base import bucket

    held = [bucket(f"reward-holdout/{p}", seed) < holdout for p in pairs.prompt]
    held = torch.tensor(held, dtype=torch.bool)
    train, test = pairs.select(~held), pairs.select(held)
    if len(train) == 0 or len(test) == 0:
        raise UserError(f"{len(train)} training and {len(test)} held-out pairs: need more data")
    return train, test
