"""`hybridbench train-citer`: label tokens, train CITER's router MLP, calibrate tau, and repeat once
with the trained router in the rollouts (CITER's second round).

    hybridbench train-citer --task gsm8k --train-limit 40 --calib-limit 10 --out runs/citer
    hybridbench train-citer --task gsm8k --mode label_free \\
        --trajectories runs/gsm8k-train-small/records.jsonl --out runs/citer-lf

Writes into --out (each step is a checkpoint; rerunning the command resumes):
  labels_r1.safetensors   round-1 token labels (`harness.training.labels`), saved after every example
  citer_r1.pt             the MLP after round 1 of two (best validation loss), tau, split ids
  labels_r2.safetensors   round 2: rollout positions relabelled with citer_r1 in the loop
  citer.pt                the final router (the last round's), for `--router-arg path=`
  train_log.jsonl         one line per epoch: round, epoch, train/val loss, val accuracy

Training data come only from the task's `train` split; tau is calibrated on `calib`: the
`--target-share` quantile of the router's scores over small's hidden states along the calib
trajectories, so that share of calib tokens would be deferred. Evaluate on `test`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.backends.engine import engine_from_args
from harness.backends.model_spec import ModelSpec
from harness.errors import UserError
from harness.training.common import EarlyStopping, label_config, provenance, train_calib


@dataclass(frozen=True)
class FitConfig:
    """Optimisation of the router MLP (CITER: Adam, BCE, early stopping on validation loss)."""

    epochs: int = 30  # upper bound on passes over the training rows
    lr: float = 1e-3  # Adam learning rate
    batch_size: int = 64  # rows per step
    patience: int = 5  # epochs without a better validation loss before stopping
    val_fraction: float = 0.2  # share of train *examples* held out for validation
    seed: int = 0  # seeds the example split, initialisation and batch order


def fit_router(
    data, fit: FitConfig, calib_hidden, share: float, out: Path, round_: int, common, final: bool
):
    """Train the MLP on the labelled rows, calibrate tau on `calib_hidden()` (a callable: the
    calib states are made only when needed), save `citer_r{round}.pt` (`citer.pt` for the final
    round: the router is stored once); resumable: an existing checkpoint of this round is kept."""
    from routers.calibration import calibrated_threshold

    path = out / ("citer.pt" if final else f"citer_r{round_}.pt")
    if path.exists():
        _add_val_auc(path, data, fit)
        return path
    x, y, groups = _labelled_rows(data)
    if len(torch.unique(y)) < 2:
        raise UserError(f"round {round_} labels are all {int(y[0])}: nothing to learn")
    log = out / "train_log.jsonl"
    mlp, stats = train_mlp(x, y, groups, fit, log_path=log, tag={"round": round_})
    scores = torch.sigmoid(mlp.eval()(calib_hidden())).detach()
    tau = calibrated_threshold(scores, share)
    torch.save(
        {
            "kind": "citer",
            "hidden_size": x.shape[1],
            "state_dict": mlp.state_dict(),
            "threshold": tau,
            "target_share": share,
            "calib_scores": scores.float(),  # so `share=` can re-calibrate tau at run time
            "round": round_,
            "fit": fit.__dict__,
            "stats": stats,
            "label_summary": data.summary(),
            **common,
        },
        path,
    )
    print(f"round {round_}: {stats}, tau={tau:.4f} -> {path}", file=sys.stderr)
    return path


def train_mlp(x, y, groups, fit: FitConfig, log_path=None, tag=None, progress=True):
    """BCE training of `CiterMLP` with Adam and early stopping on a held-out set of examples.

    Returns (the best model by validation loss, stats dict).
    """
    from routers.citer import CiterMLP

    g = torch.Generator().manual_seed(fit.seed)
    is_val = _validation_rows(groups, fit, g)
    xt, yt, xv, yv = x[~is_val], y[~is_val], x[is_val], y[is_val]
    torch.manual_seed(fit.seed)
    mlp = CiterMLP(x.shape[1])
    opt = torch.optim.Adam(mlp.parameters(), lr=fit.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    early, epoch = EarlyStopping(fit.patience, log_path, progress), 0
    for epoch in range(1, fit.epochs + 1):
        mlp.train()
        order = torch.randperm(len(xt), generator=g)
        total = 0.0
        for s in range(0, len(order), fit.batch_size):
            b = order[s : s + fit.batch_size]
            if len(b) < 2:  # BatchNorm needs two rows in training mode
                continue
            loss = loss_fn(mlp(xt[b]), yt[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(b)
        val_loss, val_acc = _evaluate(mlp, xv, yv, loss_fn)
        row = {**(tag or {}), "epoch": epoch, "train_loss": total / max(1, len(xt))}
        row |= {"val_loss": val_loss, "val_acc": val_acc}
        if early.stop(mlp, row, val_loss):
            break
    mlp.load_state_dict(early.best_state)
    _, acc = _evaluate(mlp, xv, yv, loss_fn)
    stats = {
        "train_rows": len(xt),
        "val_rows": len(xv),
        "epochs": epoch,
        "val_loss": early.best,
        "val_acc": acc,
        "val_majority_acc": float(max(yv.mean(), 1 - yv.mean())),
        "val_auc": _auc(mlp, xv, yv),
    }
    return mlp.eval(), stats


def _labelled_rows(data) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(small's hidden states, labels, example index) of the rows a label decided."""
    known = data["label"] >= 0
    return data["hidden"][known].float(), data["label"][known].float(), data["example"][known]


def _validation_rows(
    groups: torch.Tensor, fit: FitConfig, g: torch.Generator | None = None
) -> torch.Tensor:
    """Rows of the held-out examples (a `fit.val_fraction` of them, seeded by `g`, else by
    `fit.seed` as training draws them): early stopping and the validation figures use them,
    training does not."""
    g = g or torch.Generator().manual_seed(fit.seed)
    ex = torch.unique(groups)
    n_val = max(1, int(round(fit.val_fraction * len(ex))))
    return torch.isin(groups, ex[torch.randperm(len(ex), generator=g)[:n_val]])


@torch.no_grad()
def _auc(mlp, x, y) -> float:
    """AUC of the MLP's P(small suffices) against the labels (0.5: no better than a constant)."""
    from harness.training.common import auc

    return auc(torch.sigmoid(mlp.eval()(x)), y)


def _add_val_auc(path: Path, data, fit: FitConfig) -> None:
    """A checkpoint saved before its stats had `val_auc`: the same validation rows (the split is
    seeded) scored by its MLP, written back into it."""
    from routers.citer import CiterMLP

    ckpt = torch.load(path, weights_only=True)
    if "val_auc" in ckpt.get("stats", {}):
        return
    x, y, groups = _labelled_rows(data)
    is_val = _validation_rows(groups, fit)
    mlp = CiterMLP(x.shape[1])
    mlp.load_state_dict(ckpt["state_dict"])
    ckpt["stats"]["val_auc"] = _auc(mlp, x[is_val], y[is_val])
    torch.save(ckpt, path)


@torch.no_grad()
def _evaluate(mlp, x, y, loss_fn):
    mlp.eval()
    logits = mlp(x)
    return float(loss_fn(logits, y)), float(((logits > 0).float() == y).float().mean())


def _calib_hidden(engine, task, calib, cfg, trajectories) -> torch.Tensor:
    """Small's hidden states along the calib trajectories of this mode (reference answers, or
    small's own answers: from `trajectories` where given, the others decoded here together),
    the same states the router sees when small writes the answer."""
    from tqdm import tqdm

    from harness.training.labels import reference_text, small_hidden

    if cfg.mode == "reference":
        trajs = {
            ex.id: engine.tokenizer.encode(reference_text(task, ex), add_special_tokens=False)
            for ex in calib
        }
    else:
        trajs = {ex.id: list(trajectories[ex.id]) for ex in calib if ex.id in (trajectories or {})}
        missing = [ex for ex in calib if ex.id not in trajs]
        trajs |= _decode(engine, None, task, missing, cfg.max_new_tokens) if missing else {}
    hs = []
    for ex in tqdm(calib, desc="calib hidden states", unit="example", file=sys.stderr):
        if trajs[ex.id]:
            hs.append(small_hidden(engine, ex, trajs[ex.id], cfg.chunk).float())
    if not hs:
        raise UserError("the calib examples gave no tokens to calibrate on")
    return torch.cat(hs)


def _decode(engine, router, task, examples, max_new_tokens, cache: Path | None = None) -> dict:
    """example id -> emitted token ids with `router` (small alone when None), greedy, up to
    `max_new_tokens` (0: the task's budget), stopping at EOS and the task's stop strings.
    `cache`: a JSON-lines file each finished answer is appended to, so a rerun resumes."""
    from harness.core.loop import DecodeConfig
    from harness.core.scheduler import Job
    from routers.baselines import SmallOnly

    router = router or SmallOnly()
    cfg = DecodeConfig(
        max_new_tokens=max_new_tokens or task.max_new_tokens,
        stop=tuple(task.stop),
        eos_ids=engine.eos_ids,
    )
    out = {}
    if cache is not None and cache.exists():
        for line in cache.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a crash: decoded again
                continue
            out[row["id"]] = row["token_ids"]
    jobs = [Job(ex.id, engine.encode(ex.messages), cfg) for ex in examples if ex.id not in out]
    with contextlib.ExitStack() as stack:
        f = stack.enter_context(cache.open("a")) if cache is not None else None
        for j, g in engine.generate_each(router, jobs, f"decode with {router.name}"):
            out[j.key] = list(g.token_ids)
            if f is not None:
                # "large": how many of them the router gave to large (its share on train)
                row = {"id": j.key, "token_ids": out[j.key], "large": sum(g.provenance)}
                f.write(json.dumps(row) + "\n")
                f.flush()
    return {ex.id: out[ex.id] for ex in examples}


def _read_trajectories(paths: str) -> dict:
    """example id -> token ids from runs' records files (or run folders), comma-separated
    (small-only runs: one over train, one over calib)."""
    from harness.core.run_folder import records_in

    out = {}
    for path in (p.strip() for p in paths.split(",") if p.strip()):
        recs = records_in(path)
        if not recs:
            raise UserError(f"{path} holds no records")
        out |= {k: r["generation"]["token_ids"] for k, r in recs.items()}
    return out


@dataclass(frozen=True)
class CiterSpec:
    """One `hybridbench train-citer`: which task's examples, how they are labelled, how the
    router is fitted, on which pair."""

    task: str  # task name, import path or entry point
    out: str  # folder for labels, checkpoints and the log (resumed)
    task_args: Mapping = field(default_factory=dict)  # the task's keyword arguments
    split_seed: int = 0  # the hashed split's seed
    train_limit: int = 40  # first N train examples
    calib_limit: int = 10  # first N calib examples
    mode: str = "reference"  # reference | label_free
    trajectories: str | None = None  # small-only run folders whose answers are labelled
    rounds: int = 2  # labelling rounds (CITER: 2)
    max_rollouts: int = 2  # rolled-out positions per example
    rollout_tokens: int = 0  # one rollout's budget (0: the task's)
    max_new_tokens: int = 0  # label_free decode budget (0: the task's)
    target_share: float = 0.2  # the calib share deferred at the checkpoint's threshold
    epochs: int = 30
    lr: float = 1e-3
    batch_size: int = 64
    patience: int = 5  # epochs without a better validation loss before stopping
    seed: int = 0  # seeds labelling and fitting
    models: ModelSpec = ModelSpec(batch="auto")  # the pair that labels


def train(spec: CiterSpec) -> int:
    """`hybridbench train-citer`: label, train and calibrate in `spec.out` (resumed)."""
    from harness.training.labels import TokenLabels, build_labels, relabel_rollouts
    from routers.citer import Citer
    from tasks import get_task

    if not 0 < spec.target_share < 1:
        raise UserError(f"--target-share must be in (0, 1), got {spec.target_share}")
    if spec.rounds not in (1, 2):
        raise UserError(f"--rounds must be 1 or 2, got {spec.rounds}")
    task = get_task(spec.task, **spec.task_args)
    train, calib = train_calib(task, spec.split_seed, spec.train_limit, spec.calib_limit, 2)
    trajectories = _read_trajectories(spec.trajectories) if spec.trajectories else None
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = engine_from_args(spec.models)
    cfg = label_config(spec)
    fit = FitConfig(spec.epochs, spec.lr, spec.batch_size, spec.patience, seed=spec.seed)
    # small's hidden states along calib (minutes): made only when a round is trained, not when
    # a rerun finds its checkpoints
    calib_hidden = functools.cache(lambda: _calib_hidden(engine, task, calib, cfg, trajectories))
    common = {**provenance(engine, task, spec.split_seed, train, calib), "mode": spec.mode}

    data = build_labels(
        engine, task, train, cfg, out / "labels_r1.safetensors", trajectories=trajectories
    )
    print(f"round 1 labels: {data.summary()}", file=sys.stderr)
    final = spec.rounds == 1
    ckpt = fit_router(data, fit, calib_hidden, spec.target_share, out, 1, common, final)
    if spec.rounds == 2:
        path2 = out / "labels_r2.safetensors"
        if spec.mode == "reference":  # resumes a partly relabelled file
            router = Citer(str(ckpt))
            data = relabel_rollouts(engine, task, train, data, router, path2)
        elif path2.exists() and set(TokenLabels.load(path2).meta["done"]) >= {e.id for e in train}:
            data = build_labels(engine, task, train, cfg, path2, round_=2)  # (restores hidden)
        else:  # label_free: trajectories decoded with the round-1 router in the loop
            router = Citer(str(ckpt))
            cache = out / "trajectories_r2.jsonl"
            traj = _decode(engine, router, task, train, spec.max_new_tokens, cache)
            data = build_labels(
                engine, task, train, cfg, path2, trajectories=traj, round_=2, progress=True
            )
        print(f"round 2 labels: {data.summary()}", file=sys.stderr)
        ckpt = fit_router(data, fit, calib_hidden, spec.target_share, out, 2, common, True)
    print(f"router: {ckpt}")
    return 0
