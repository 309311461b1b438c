"""What the training pipelines share: splits, batched decoding with progress, provenance, and
the log of what each training command cost."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

from harness.core.run_folder import COST_LOG
from harness.errors import UserError
from harness.training.labels import LabelConfig

_NOTHING_DONE = [False]


def nothing_to_do() -> None:
    """Say that this invocation found its work already done (a finished run re-invoked, as a
    restarted chain does): `cost_log` then adds no line, so the invocation counts stay those of
    the work itself."""
    _NOTHING_DONE[0] = True


@contextlib.contextmanager
def cost_log(folder, argv: list[str]):
    """Append what one invocation of a training command (`argv`) cost to FOLDER/cost.jsonl when
    it ends (also after an error or an interruption: the line's status says so): wall seconds,
    model loading included, this process's CPU seconds (all its threads: unlike wall time, not
    inflated while the process is stopped, e.g. a chain paused with SIGSTOP), and the tokens every Engine
    generation in this process emitted. A resumed command adds a line; what a router cost is the
    sum of its lines (`total_cost`); one that did nothing (`nothing_to_do`) adds none."""
    from harness.backends import engine

    rec = {"argv": list(argv), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    t0, c0, g0, status = time.monotonic(), time.process_time(), engine.GENERATED[0], "interrupted"
    _NOTHING_DONE[0] = False
    try:
        yield
        status = "done"
    except Exception:
        status = "failed"
        raise
    finally:
        if not (status == "done" and _NOTHING_DONE[0]):
            rec.update(
                status=status,
                wall_s=round(time.monotonic() - t0, 1),
                cpu_s=round(time.process_time() - c0, 1),
                tokens_generated=engine.GENERATED[0] - g0,
            )
            path = Path(folder) / COST_LOG
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")


def total_cost(out) -> dict:
    """The sum of OUT/cost.jsonl's lines: {"wall_s", "cpu_s", "tokens_generated", "invocations",
    "without_cpu"} (cpu_s sums the lines that have it; lines written before it was logged are
    counted in without_cpu)."""
    path = Path(out) / COST_LOG
    rows = (
        [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    )
    return {
        "wall_s": round(sum(r["wall_s"] for r in rows), 1),
        "cpu_s": round(sum(r.get("cpu_s", 0.0) for r in rows), 1),
        "tokens_generated": sum(r["tokens_generated"] for r in rows),
        "invocations": len(rows),
        "without_cpu": sum("cpu_s" not in r for r in rows),
    }


def train_calib(
    task, split_seed: int, train_limit: int | None, calib_limit: int | None, min_train: int = 2
):
    """(train, calib) examples of `task`: the first N of each seeded split, checked non-empty."""
    train = task.split("train", seed=split_seed)[:train_limit]
    calib = task.split("calib", seed=split_seed)[:calib_limit]
    if len(train) < min_train or not calib:
        raise UserError(
            f"need at least {min_train} train and 1 calib example of {task.name}; "
            f"got {len(train)} and {len(calib)}"
        )
    return train, calib


def provenance(engine, task, split_seed: int, train, calib) -> dict:
    """The fields every router checkpoint records: task, split, the ids it must never be
    evaluated on, the models' sources and the backend family of small's hidden states."""
    from routers.citer import backend_family

    return {
        "task": task.name,
        "split_seed": split_seed,
        "train_ids": [ex.id for ex in train],
        "calib_ids": [ex.id for ex in calib],
        "models": {r: b.info.source for r, b in engine.backends.items()},
        "small_backend": backend_family(engine.backends["small"].info),
    }


def auc(scores, labels) -> float:
    """Area under the ROC curve: the chance that a random positive (label 1) scores above a
    random negative, ties counted half (Mann-Whitney); nan without both classes."""
    import torch

    s = torch.as_tensor(scores, dtype=torch.float64).flatten()
    y = torch.as_tensor(labels).flatten() > 0.5
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = s.argsort()
    _, inverse, counts = torch.unique_consecutive(s[order], return_inverse=True, return_counts=True)
    mid_rank = counts.cumsum(0).double() - (counts.double() - 1) / 2  # 1-based, ties averaged
    ranks = torch.empty_like(s)
    ranks[order] = mid_rank[inverse]
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


class EarlyStopping:
    """Keeps the network state of the best validation loss so far and says when `patience`
    epochs in a row brought no better one; each epoch's row goes to `log_path` (JSON lines) and,
    with `progress`, to stderr."""

    def __init__(self, patience: int, log_path=None, progress: bool = False):
        self.patience, self.log_path, self.progress = patience, log_path, progress
        self.best, self.best_state, self.bad = float("inf"), None, 0

    def stop(self, net, row: dict, val_loss: float) -> bool:
        """Record one epoch (`row`, its `val_loss`); True when training should stop."""
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(row) + "\n")
        if self.progress:
            print(json.dumps(row), file=sys.stderr)
        if val_loss < self.best - 1e-6:
            self.best, self.bad = val_loss, 0
            self.best_state = {k: v.clone() for k, v in net.state_dict().items()}
            return False
        self.bad += 1
        return self.bad >= self.patience


def label_config(spec) -> LabelConfig:
    """The labelling options of a training command (`--mode`, `--max-rollouts`, ...), read by
    name from its spec."""
    return LabelConfig(
        mode=spec.mode,
        max_rollouts=spec.max_rollouts,
        rollout_tokens=spec.rollout_tokens,
        max_new_tokens=spec.max_new_tokens,
        seed=spec.seed,
    )
