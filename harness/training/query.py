"""`hybridbench train-query`: train the query-level router and calibrate its threshold.

    hybridbench run --task gsm8k --router small --split train --limit 40 --out runs/gsm8k-train-small
    hybridbench train-query --task gsm8k --small-records runs/gsm8k-train-small/records.jsonl \\
        --train-limit 40 --calib-limit 10 --share 0.3 --out runs/query

1. feature: small's last hidden state mean-pooled over the prompt, from the same prefill call
   the decoding core makes for a query router (so the router sees exactly this vector);
2. label: was small's greedy answer correct (the task's primary metric == 1) — read from a
   small-only run's records over the train split (`--small-records`), or decoded here;
3. a logistic regression (standardized features, L2 penalty chosen by 5-fold cross-validation
   on train) gives P(small correct);
4. tau = the `--share` quantile of its scores on the calib split, so that share of calib
   prompts goes to large (RouteLLM). The calib scores are stored, so `share=` can be changed
   at run time without retraining.
Writes --out/query.pt (with the train and calib ids, which the runner refuses to evaluate on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.backends.engine import engine_from_args
from harness.backends.model_spec import ModelSpec
from harness.errors import UserError
from harness.training.common import auc, provenance, train_calib

L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


@torch.inference_mode()
def features(engine, examples) -> torch.Tensor:
    """[n, H]: small's last hidden state mean-pooled over each prompt (the core's QueryView)."""
    import sys

    from tqdm import tqdm

    small = engine.backends["small"]
    rows = []
    for ex in tqdm(examples, desc="prompt features", unit="prompt", file=sys.stderr):
        ids = engine.encode(ex.messages)
        small.reset()
        _, h = small.forward(ids, len(ids), hidden=True)
        rows.append(h.mean(dim=0))
    small.reset()
    return torch.stack(rows)


def fit_logistic(x: torch.Tensor, y: torch.Tensor, seed: int = 0, folds: int = 5):
    """L2-penalised logistic regression (full-batch L-BFGS) with the penalty picked by k-fold
    cross-validated log loss on the train rows. Returns (QueryClassifier, stats)."""

    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(x), generator=g)
    fold_of = torch.empty(len(x), dtype=torch.long)
    fold_of[order] = torch.arange(len(x)) % folds
    cv, oof = {}, {}  # per penalty: mean validation log loss, out-of-fold scores
    for lam in L2_GRID:
        losses, oof[lam] = [], torch.zeros(len(x))
        for f in range(folds):
            tr, va = fold_of != f, fold_of == f
            clf = _fit(x[tr], y[tr], lam)
            with torch.no_grad():
                logits = clf(x[va])
                losses.append(torch.nn.functional.binary_cross_entropy_with_logits(logits, y[va]))
                oof[lam][va] = torch.sigmoid(logits)
        cv[lam] = float(torch.stack(losses).mean())
    best = min(cv, key=cv.get)
    clf = _fit(x, y, best)
    stats = {"l2": best, "cv_log_loss": cv[best], "prior_log_loss": prior_log_loss(y, y)}
    stats["cv_auc"] = auc(oof[best], y)  # the prior (one score for all) has AUC 0.5
    return clf.eval(), stats


def prior_log_loss(y_fit: torch.Tensor, y: torch.Tensor) -> float:
    """Log loss on `y` of the constant prediction P = mean(y_fit) (the prior)."""
    base = float(y_fit.float().mean().clamp(1e-6, 1 - 1e-6))
    p = torch.full_like(y.float(), base)
    return float(torch.nn.functional.binary_cross_entropy(p, y.float()))


def heldout_stats(scores: torch.Tensor, y: torch.Tensor, y_train: torch.Tensor) -> dict:
    """The router's P(small correct) on held-out prompts against their labels, beside the
    prior's (train's base rate): log loss both ways and AUC (the prior's is 0.5)."""
    loss = torch.nn.functional.binary_cross_entropy(scores.float().clamp(1e-6, 1 - 1e-6), y)
    return {
        "n": len(y),
        "small_correct": float(y.mean()),
        "log_loss": float(loss),
        "prior_log_loss": prior_log_loss(y_train, y),
        "auc": auc(scores, y),
    }


def _fit(x, y, lam: float):
    from routers.query import QueryClassifier

    clf = QueryClassifier(x.shape[1])
    clf.mean.copy_(x.mean(0))
    clf.std.copy_(x.std(0).clamp_min(1e-6) if len(x) > 1 else torch.ones(x.shape[1]))
    opt = torch.optim.LBFGS(clf.linear.parameters(), max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(clf(x), y)
        loss = loss + lam * clf.linear.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return clf


def _labels_from_records(path, train, task) -> dict:
    from harness.core.run_folder import records_in

    recs = records_in(path)
    missing = [ex.id for ex in train if ex.id not in recs]
    if missing:
        raise UserError(f"{path} lacks {len(missing)} of the examples, e.g. {missing[0]}")
    return {ex.id: float(recs[ex.id]["scores"][task.metric]) >= 1.0 for ex in train}


def _labels_by_decoding(engine, task, train, max_new_tokens) -> dict:

    from harness.core.loop import DecodeConfig
    from harness.core.scheduler import Job
    from routers.baselines import SmallOnly

    cfg = DecodeConfig(max_new_tokens=max_new_tokens or task.max_new_tokens, stop=tuple(task.stop))
    jobs = [Job(ex, engine.encode(ex.messages), cfg) for ex in train]
    out = {
        job.key.id: float(task.score(job.key, g.text)[task.metric]) >= 1.0
        for job, g in engine.generate_each(SmallOnly(), jobs, "small answers")
    }
    return {ex.id: out[ex.id] for ex in train}


@dataclass(frozen=True)
class QuerySpec:
    """One `hybridbench train-query`: which task's prompts, which share of them to large."""

    task: str  # task name, import path or entry point
    out: str  # folder for query.pt
    task_args: Mapping = field(default_factory=dict)  # the task's keyword arguments
    split_seed: int = 0  # the hashed split's seed
    train_limit: int = 40  # first N train examples
    calib_limit: int = 10  # first N calib examples
    share: float = 0.3  # target share of prompts sent to large
    small_records: str | None = None  # small-only records over train (else small decodes)
    calib_records: str | None = None  # small-only records over calib: the held-out AUC
    max_new_tokens: int | None = None  # decode budget without records (None: the task's)
    seed: int = 0  # seeds the fit
    models: ModelSpec = ModelSpec(batch="auto")  # the pair


def train(spec: QuerySpec) -> int:
    """`hybridbench train-query`: fit the classifier and its threshold; OUT/query.pt."""
    from routers.calibration import calibrated_threshold
    from tasks import get_task

    if not 0 <= spec.share <= 1:
        raise UserError(f"--share must be in [0, 1], got {spec.share}")
    task = get_task(spec.task, **spec.task_args)
    train, calib = train_calib(task, spec.split_seed, spec.train_limit, spec.calib_limit, 5)
    correct = _labels_from_records(spec.small_records, train, task) if spec.small_records else None
    engine = engine_from_args(spec.models)
    if correct is None:
        correct = _labels_by_decoding(engine, task, train, spec.max_new_tokens)
    y = torch.tensor([correct[ex.id] for ex in train], dtype=torch.float32)
    x_train = features(engine, train)
    x_calib = features(engine, calib)
    clf, stats = fit_logistic(x_train, y, seed=spec.seed)
    with torch.no_grad():
        calib_scores = torch.sigmoid(clf(x_calib))
    tau = calibrated_threshold(calib_scores, spec.share)
    if spec.calib_records:  # calib is held out from training: the router's AUC there
        held = _labels_from_records(spec.calib_records, calib, task)
        y_calib = torch.tensor([held[ex.id] for ex in calib], dtype=torch.float32)
        stats["calib"] = heldout_stats(calib_scores, y_calib, y)
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = {
        "kind": "query",
        "hidden_size": x_train.shape[1],
        "state_dict": clf.state_dict(),
        "threshold": tau,
        "share": spec.share,
        "calib_scores": calib_scores.tolist(),
        "stats": stats,
        **provenance(engine, task, spec.split_seed, train, calib),
    }
    torch.save(ckpt, out / "query.pt")
    print(
        f"train: {len(train)} prompts, small correct {float(y.mean()):.3f}; {stats}; "
        f"tau={tau:.4f} sends {float((calib_scores < tau).float().mean()):.3f} of "
        f"{len(calib)} calib prompts to large -> {out / 'query.pt'}"
    )
    return 0
