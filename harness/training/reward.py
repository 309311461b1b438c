"""`hybridbench train-reward` and `hybridbench calibrate-reward` (seed paper §2.1.3, §3).

    hybridbench train-reward --data runs/reward/data --out runs/reward/model --threads 2
    hybridbench calibrate-reward --checkpoint runs/reward/model/reward.pt --task gsm8k \\
        --limit 10 --max-new-tokens 200 --out runs/reward/calib-gsm8k.json --threads 2

Training. The reward model (routers/reward.py) is the first `--layers` layers of the small model
with a head. What is trained: the head only, on a frozen backbone; the head is the paper's linear
layer (`--head linear`) or a small MLP (`--head mlp`: H -> 256 -> GELU -> 1), and the backbone's
depth (`--layers`, up to all of small's) is the other capacity knob. Why frozen:
  - with the backbone frozen, the score at a chunk's last token is head(h) where h comes from
    ONE forward pass over prompt + response (causal attention: h at position t does not depend on
    later tokens), so every chunk of a response shares one pass, features are computed once
    (cached beside the data, `--data/features-<identity>/`, shared by every head trained on the
    same data, backbone, depth and dtype) and each epoch is matrix algebra on cached rows;
  - training backbone layers (or LoRA adapters) would need a backward pass through them over
    every response, every epoch: hours per epoch on a 2-core CPU for 1,000 prompts;
  - a head-only checkpoint also runs on llama.cpp beside a llama.cpp small model (the reward
    router's fast path), a trained backbone could not.
Which depth and head: train each (features are cached per depth) and compare their held-out
preference accuracy (metrics.json); the choice and its reason go in the results.
Held-out prompts (`--holdout`, by prompt id, so chunks of one response never straddle the
split) give the preference accuracy and loss reported at the end and in --out/metrics.json.
Progress is shown per epoch; --out/train_state.pt is written every `--save-every` epochs and a
re-run with the same settings resumes from it (and from --out/l2_cv.json, the penalty's
cross-validation); a re-run of a finished one (metrics.json, written last) prints its summary.

Calibration. Small answers `--limit` examples of a task's calib split greedily (the core, `small`
router); the reward model scores every emitted token in one pass; the file keeps the scores, so a
router asked for `target_share=S` defers below their S-quantile (RouteLLM's calibration).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from harness.errors import UserError
from harness.metrics import ratio_ci
from harness.training.common import nothing_to_do


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


@torch.inference_mode()
def response_features(model, prompt_ids: list[int], ids: list[int], lengths: list[int]):
    """Backbone outputs [len(lengths), H] (float32) at the last token of each prefix ids[:L]:
    one pass over prompt + ids[:max L]."""
    if not lengths:
        return torch.zeros(0, model.config.get_text_config().hidden_size)
    seq = prompt_ids + ids[: max(lengths)]
    device = next(model.parameters()).device
    _, h, _ = model(torch.tensor([seq], device=device))
    rows = [len(prompt_ids) + n - 1 for n in lengths]
    return h[0, rows].float().cpu()


def pair_features(model, records: list[dict]) -> tuple[Pairs, int]:
    """All non-tied chunk pairs of `records` as features, and how many tied pairs were dropped.

    A tie (large's chunk == small's chunk token for token) has r_w = r_l for every model: it adds
    a constant log 2 to the loss and no gradient, and no preference to measure accuracy on.
    """
    from tqdm import tqdm

    chosen, rejected, length, prompt, ties = [], [], [], [], 0
    for r in tqdm(records, desc="features", unit="prompt", file=sys.stderr):
        keep = [c for c in r["chunks"] if c["chosen"] != c["rejected"]]
        ties += len(r["chunks"]) - len(keep)
        lengths = [c["length"] for c in keep]
        if not lengths:
            continue
        chosen.append(response_features(model, r["prompt_ids"], r["large"]["ids"], lengths))
        rejected.append(response_features(model, r["prompt_ids"], r["small"]["ids"], lengths))
        length += lengths
        prompt += [r["id"]] * len(lengths)
    size = model.config.get_text_config().hidden_size
    cat = lambda xs: torch.cat(xs) if xs else torch.zeros(0, size)  # noqa: E731
    return Pairs(cat(chosen), cat(rejected), torch.tensor(length), tuple(prompt)), ties


@dataclass(frozen=True)
class TrainConfig:
    """Head training settings: Adam on the pairwise loss plus an L2 penalty, in minibatches."""

    epochs: int = 200  # passes over the training pairs
    lr: float = 1e-2  # Adam learning rate
    l2: float = 0.3  # penalty l2 * |w|^2 on the head in standardized-feature units
    batch_size: int = 64  # pairs per step
    seed: int = 0  # shuffling: epoch e uses a generator seeded with seed + e
    head: str = "linear"  # "linear" (the paper's) or "mlp" (routers.reward.HEADS)


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
    from routers.reward import make_head

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
        train, scale, cfg, start, on_epoch,
        score=lambda x: x @ w,
        penalty=lambda: (w * w).sum(),
        opt=opt,
        snapshot=lambda epoch: _state(epoch, w, scale, opt),
    )  # fmt: skip


def train_mlp_head(train: Pairs, cfg: TrainConfig, state: dict | None = None, on_epoch=None):
    """`train_head` for the MLP head (routers.reward.make_head "mlp") on standardized features,
    L2 penalty `cfg.l2` on its weight matrices. State: epoch, params (standardized units),
    head_state (the feature scale folded into the first layer: it reads raw features),
    optimizer."""
    from routers.reward import make_head

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
        train, scale, cfg, start, on_epoch,
        score=lambda x: net(x).squeeze(-1),
        penalty=lambda: net[0].weight.pow(2).sum() + net[2].weight.pow(2).sum(),
        opt=opt,
        snapshot=lambda epoch: _mlp_state(epoch, net, scale, opt),
    )  # fmt: skip


def _epochs(train: Pairs, scale, cfg: TrainConfig, start: int, on_epoch, *, score, penalty, opt,
            snapshot) -> dict:  # fmt: skip
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
    issue13-results.md, session 17: the CV-loss choice ranked held-out pairs worse). Folds group pairs by prompt
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


# --- train-reward ----------------------------------------------------------------------------


def configure_train_reward(p) -> None:
    p.add_argument("--data", required=True, help="folder written by `hybridbench reward-data`")
    p.add_argument("--out", required=True, help="model folder (created; resumed if it exists)")
    p.add_argument("--backbone", default=None, help="default: the data's small model")
    p.add_argument("--layers", type=int, default=6, help="backbone depth (first N layers)")
    p.add_argument(
        "--head",
        default="linear",
        choices=tuple(HEAD_DEFAULTS),
        help="linear (the paper's) or mlp (H -> 256 -> GELU -> 1 on the frozen features)",
    )
    p.add_argument("--dtype", default="bfloat16", help="backbone dtype (use the pair's)")
    p.add_argument("--holdout", type=float, default=0.2, help="share of prompts held out")
    p.add_argument("--epochs", type=int, default=None, help="default: 200 linear, 40 mlp")
    p.add_argument("--lr", type=float, default=None, help="default: 1e-2 linear, 1e-3 mlp")
    p.add_argument(
        "--l2",
        type=float,
        default=None,
        help="L2 penalty on the head; default: the best 5-fold CV preference accuracy over "
        "training prompts among "
        + "; ".join(f"{k} {v['l2_grid']}" for k, v in HEAD_DEFAULTS.items())
        + " (grown past an end while that end is best)",
    )
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=int, default=50, help="epochs between checkpoints")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")


def run_train_reward(args) -> int:
    import time

    from routers.reward import build_reward_model, save_checkpoint

    records, source, key = _inputs(args)
    out = Path(args.out)
    d = HEAD_DEFAULTS[args.head]
    cfg = TrainConfig(
        args.epochs or d["epochs"], args.lr or d["lr"], args.l2 or 0.0, args.batch_size,
        args.seed, args.head,
    )  # fmt: skip
    done = _finished(out, key, cfg, args)
    if done is not None:
        print(f"{out / 'metrics.json'}: already trained with these settings (another --out, or "
              "delete it, to train again)")  # fmt: skip
        _summary(out, done)
        nothing_to_do()
        return 0
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = build_reward_model(source, args.layers, args.dtype, head=args.head)
    ident = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    pairs, ties = _features(model, records, key, Path(args.data) / f"features-{ident}.pt")
    t_features = time.perf_counter() - t0
    train, test = heldout_split(pairs, args.holdout, args.seed)
    cv = {}
    if args.l2 is None:
        grid = d["l2_grid"]
        cv_path, cv_key = (
            out / "l2_cv.json",
            {**key, "config": asdict(cfg), "holdout": args.holdout, "l2_search": l2_search(grid)},
        )
        saved = json.loads(cv_path.read_text()) if cv_path.is_file() else {}
        if saved.get("key") == cv_key:  # an interrupted run: the choice made before it
            cv = {float(k): v for k, v in saved["cv"].items()}
            print(f"--l2 chosen by 5-fold cross-validation before ({cv_path})")
        else:
            print(f"choosing --l2 from {grid} (grown past an end while that end is best) by "
                  "5-fold cross-validated preference accuracy over training prompts")  # fmt: skip
            cv = select_l2(train, cfg, grid)[1]
            _atomic_write(cv_path, json.dumps({"key": cv_key, "cv": cv}, indent=1) + "\n")
            if (out / "train_state.pt").exists():  # trained with another search's choice
                print(
                    f"{out / 'train_state.pt'}: from an earlier --l2 search; training starts over"
                )
                (out / "train_state.pt").unlink()
        best = max(cv, key=lambda g: (cv[g]["acc"], -cv[g]["loss"]))
        cfg = replace(cfg, l2=best)
        print(f"  --l2 {best:g}: the best cross-validated preference accuracy")
    key = {**key, "config": asdict(cfg), "holdout": args.holdout}
    state = _fit(train, test, cfg, out / "train_state.pt", key, args.save_every)
    w = state_head(state)
    with torch.no_grad():
        if args.head == "linear":
            model.head.weight.copy_(w[None])
        else:
            model.head.load_state_dict(state["head_state"])
    zero = torch.zeros(pairs.chosen.shape[1])  # the untrained model: every score 0
    metrics = {
        "n_prompts": len(records),
        "n_pairs": {"train": len(train), "heldout": len(test), "ties_dropped": ties},
        "heldout_prompts": len(set(test.prompt)),
        "untrained": {"train": evaluate(zero, train), "heldout": evaluate(zero, test)},
        "final": {"train": evaluate(w, train), "heldout": evaluate(w, test, ci=True)},
        "heldout_by_task": by_task(w, test),
        "heldout_by_length": by_length(w, test),
        "seconds": {  # this invocation on this machine (cached features load in seconds)
            "features": round(t_features, 1),
            "training": round(time.perf_counter() - t0 - t_features, 1),
        },
        "score_std": float(torch.cat([score(w, pairs.chosen), score(w, pairs.rejected)]).std()),
        "l2_cv": {str(k): v for k, v in cv.items()},  # {penalty: {acc, loss}}, 5-fold
        **({"l2_search": l2_search(d["l2_grid"])} if args.l2 is None else {}),
        **key,
    }
    used = sorted({r["id"] for r in records})
    save_checkpoint(out / "reward.pt", model, source, used_example_ids=used, metrics=metrics)
    _atomic_write(out / "metrics.json", json.dumps(metrics, indent=1) + "\n")  # written last
    _summary(out, metrics)
    return 0


def _finished(out: Path, key: dict, cfg: TrainConfig, args) -> dict | None:
    """metrics.json of a finished run with these settings (the penalty aside when it is chosen
    by cross-validation), else None."""
    path = out / "metrics.json"
    if not (path.is_file() and (out / "reward.pt").is_file()):
        return None
    m = json.loads(path.read_text())
    saved, want = dict(m.get("config", {})), asdict(cfg)
    if args.l2 is None:  # chosen by the same search (not by an older one)
        saved.pop("l2", None), want.pop("l2")
        grid = HEAD_DEFAULTS[args.head]["l2_grid"]
        if m.get("l2_search") != l2_search(grid):
            return None
    same = all(m.get(k) == v for k, v in key.items())
    return m if same and saved == want and m.get("holdout") == args.holdout else None


def _summary(out: Path, metrics: dict) -> None:
    f, h, n = metrics["final"], metrics["final"]["heldout"], metrics["n_pairs"]

    def ci(v: dict, k: str) -> str:
        return f"{v[k]:.3f} [{v[f'{k}_ci'][0]:.3f}, {v[f'{k}_ci'][1]:.3f}]"

    print(
        f"{out / 'reward.pt'}: {n['train']} train / {n['heldout']} held-out pairs "
        f"({n['ties_dropped']} ties dropped, {h['n_prompts']} held-out prompts)\n"
        f"  held-out loss {math.log(2):.4f} (untrained) -> {ci(h, 'loss')}, accuracy {ci(h, 'acc')}"
        f" (95% intervals, prompts resampled; train loss {f['train']['loss']:.4f}, "
        f"accuracy {f['train']['acc']:.3f})\n"
        f"  held-out mean reward: chosen {h['chosen_mean']:.3f}, rejected {h['rejected_mean']:.3f}\n"
        "  held-out accuracy by task: "
        + ", ".join(
            f"{t} {ci(v, 'acc')} (n={v['n']} pairs, {v['n_prompts']} prompts)"
            for t, v in metrics["heldout_by_task"].items()
        )
    )


def _inputs(args) -> tuple[list[dict], str, dict]:
    """(preference records, backbone source, identity of the features) with user-facing checks."""
    from harness import models
    from harness.training.reward_data import read_pairs

    data = Path(args.data)
    records = read_pairs(data / "pairs.jsonl")
    if not records:
        raise UserError(
            f"no preference data in {data / 'pairs.jsonl'}; run hybridbench reward-data"
        )
    if not 0 < args.holdout < 1:
        raise UserError(f"--holdout must be in (0, 1), got {args.holdout}")
    if args.threads:
        torch.set_num_threads(args.threads)
    manifest = json.loads((data / "manifest.json").read_text())
    source = args.backbone or manifest["model_sources"].get("small") or models.DEFAULT_SMALL
    if not Path(source).expanduser().exists() and source not in models.PACKAGED:
        raise UserError(f"backbone {source!r} is neither a packaged model nor a folder")
    data_sha = hashlib.sha256((data / "pairs.jsonl").read_bytes()).hexdigest()
    key = {"data_sha256": data_sha, "backbone": source, "layers": args.layers, "dtype": args.dtype}
    return records, source, key


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


def _fit(train: Pairs, test: Pairs, cfg: TrainConfig, path: Path, key: dict, every: int) -> dict:
    """`train_head` with a progress bar, a checkpoint every `every` epochs, and resume."""
    from tqdm import tqdm

    state = _resume(path, key)
    bar = tqdm(total=cfg.epochs, initial=state["epoch"] if state else 0, desc="train-reward",
               unit="epoch", file=sys.stderr)  # fmt: skip

    def on_epoch(s: dict) -> None:
        bar.update(1)
        if s["epoch"] % 10 == 0 or s["epoch"] == cfg.epochs:
            head = state_head(s)
            tr, te = evaluate(head, train), evaluate(head, test)
            bar.set_postfix_str(
                f"loss={tr['loss']:.3f} acc={tr['acc']:.3f} "
                f"heldout_loss={te['loss']:.3f} heldout_acc={te['acc']:.3f}"
            )
        if s["epoch"] % max(1, every) == 0 or s["epoch"] == cfg.epochs:
            _save_state(path, s, key)

    state = train_head(train, cfg, state, on_epoch)
    bar.close()
    return state


FEATURE_BLOCK = 50  # prompts whose features are saved together (an interrupted run resumes)


def _features(model, records, key: dict, path: Path) -> tuple[Pairs, int]:
    """Frozen-backbone features of every chunk pair, computed once and cached in `path` without
    its suffix, FEATURE_BLOCK prompts a file (`00000.pt`, ...: ~5 MB each, so that an
    interrupted run resumes from the last block)."""
    folder = path.with_suffix("")
    folder.mkdir(parents=True, exist_ok=True)
    blocks, ties = [], 0
    for start in range(0, len(records), FEATURE_BLOCK):
        part = folder / f"{start:05d}.pt"
        ids = [r["id"] for r in records[start : start + FEATURE_BLOCK]]
        saved = torch.load(part, weights_only=True) if part.exists() else None
        if saved is None or saved["key"] != key or saved["ids"] != ids:
            block, n_ties = pair_features(model, records[start : start + FEATURE_BLOCK])
            saved = {"key": key, "ids": ids, "ties": n_ties}
            saved["block"] = {**asdict(block), "prompt": list(block.prompt)}
            _atomic_save(part, saved)
            done = min(start + FEATURE_BLOCK, len(records))
            print(
                f"features: {done} of {len(records)} prompts (saved; a rerun resumes)", flush=True
            )
        blocks.append(saved["block"])
        ties += saved["ties"]
    cat = lambda k: torch.cat([b[k] for b in blocks]) if blocks else torch.zeros(0)  # noqa: E731
    prompts = tuple(p for b in blocks for p in b["prompt"])
    return Pairs(cat("chosen"), cat("rejected"), cat("length").long(), prompts), ties


def _atomic_save(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def _resume(path: Path, key: dict) -> dict | None:
    if not path.exists():
        return None
    saved = torch.load(path, weights_only=True)
    if saved.get("key") != key:
        raise UserError(f"{path} belongs to a run with other settings; use another --out")
    return saved["state"]


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _save_state(path: Path, state: dict, key: dict) -> None:
    _atomic_save(path, {"key": key, "state": state})


@torch.inference_mode()
def token_scores(model, prompt_ids: list[int], ids: list[int]) -> list[float]:
    """The reward of each token of `ids` after `prompt_ids` (one full pass, no cache)."""
    if not ids:
        return []
    device = next(model.parameters()).device
    scores, _, _ = model(torch.tensor([prompt_ids + ids], device=device))
    return scores[0, len(prompt_ids) :].tolist()
