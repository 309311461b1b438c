"""`hybridbench train-learned`: the `learned` token router (routers/learned.py) trained on token
labels the project already makes; its held-out AUC beside entropy's and confidence's on the same
tokens, and its per-token overhead.

    hybridbench train-learned --task gsm8k --target oracle --backend llama.cpp \\
        --labels results/train13/citer-lf-gsm8k/labels_r1.safetensors --out runs/learned-gsm8k
    hybridbench calibrate --router learned --checkpoint runs/learned-gsm8k/learned.pt \\
        --task gsm8k --limit 1000 --out runs/learned-gsm8k/cal.json   # target_share=S calibration=FILE

`--target oracle`: label 1 where small's greedy token equals large's (every row of a label file
has both, from teacher-forced passes); `citer`: the file's own `label` column (reference mode's
shortcut and rollouts, or label-free agreement). `--labels` reads a file (`train-citer` writes
them); without it one is made over the first `--train-limit` train examples (`--mode`,
`--trajectories` as train-citer). Into --out, each step kept so that a rerun resumes:

  labels.safetensors      the labels, when made here
  features/NNNN.hidden.safetensors   small's teacher-forced pass over each stored trajectory, 32
                          examples a file: distribution features, hidden states, labels (made
                          again when missing; `--features DIR` shares them between trainings)
  learned.pt, train_log.jsonl   the network (best validation loss), its default threshold, ids
  metrics.json            `compare_scores` on the held-out examples: router, entropy, confidence
  overhead.json           with --overhead N: ms per token beside small alone (`overhead`)

The label file's examples are split, seeded: `heldout_fraction` for metrics.json (never trained
on, nor used for early stopping), `val_fraction` for early stopping, the rest for fitting; all
from the task's train split, all named in the checkpoint.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median

import torch

from harness.backends.engine import engine_from_args
from harness.core.forcing import FORCED_CHUNK, forced_passes
from harness.core.loop import DecodeConfig
from harness.errors import UserError
from harness.files import file_sha256
from harness.training import token_net
from harness.training.citer import _read_trajectories
from harness.training.common import auc, label_config, nothing_to_do, train_calib
from harness.training.labels import TokenLabels, build_labels
from routers.baselines import EntropyRouter, SmallOnly
from routers.learned import FEATURES, INPUTS, LearnedNet, LearnedRouter, distribution_features
from tasks import get_task

FEATURES_SCHEMA = "hybridbench.learned_features/1"
TARGETS = ("oracle", "citer")
SHARES = (0.1, 0.2, 0.35)  # deferral shares at which metrics.json compares the scorers


@dataclass(frozen=True)
class FitConfig:
    """The network and its optimisation (Adam, BCE, early stopping on validation loss)."""

    inputs: tuple[str, ...] = INPUTS  # what the network reads (routers.learned.INPUTS)
    width: int = 128  # each input's projection and the MLP's width
    buckets: int = 4096  # drafted-token embedding rows (id modulo buckets)
    dropout: float = 0.1
    epochs: int = 20  # upper bound on passes over the fitting rows
    lr: float = 1e-3  # Adam learning rate
    weight_decay: float = 1e-4
    batch_size: int = 256
    patience: int = 3  # epochs without a better validation loss before stopping
    val_fraction: float = 0.1  # share of the label file's examples for early stopping
    heldout_fraction: float = 0.2  # share of its examples for the reported AUCs
    seed: int = 0  # seeds the example split, initialisation and batch order


# 1. Features: small's teacher-forced pass over each stored trajectory


@torch.inference_mode()
def forced_features(small, prompt, traj, drafts, chunk: int = FORCED_CHUNK):
    """Small teacher-forced over prompt + traj: per position, (distribution features of the
    drafted token `drafts[i]`, hidden state in bf16, small's argmax), as the router sees them
    when small writes traj."""
    dist, hid, top, at = [], [], [], 0
    for logits, h in forced_passes(small, list(prompt), list(traj), chunk, hidden=True):
        k = len(logits)
        dist.append(distribution_features(logits, torch.as_tensor(drafts[at : at + k])))
        hid.append(h.to(torch.bfloat16))
        top.append(logits.argmax(-1))
        at += k
    return torch.cat(dist), torch.cat(hid), torch.cat(top)


def build_features(engine, task, data, labels_digest: str, folder: Path, progress=True) -> dict:
    """The columns the network trains on, one row per row of the label file `data` (examples
    in file order): example (index into the file's example ids), draft (small's greedy token:
    what the router sees drafted there), dist [N, F], hidden [N, H] bf16, label (the file's),
    oracle (1 where small's greedy token equals large's), match (small's argmax now equals
    the file's: the same model and backend). Kept `token_net.GROUP` examples a file under
    `folder`; files of these labels already there are read, not made again."""
    return token_net.build_features(
        engine, task, data, labels_digest, folder, FEATURES_SCHEMA, _features_of, progress
    )


def _features_of(engine, by_id: dict, data, group: list[int]) -> dict:
    cols = {k: [] for k in ("example", "draft", "dist", "hidden", "label", "oracle", "match")}
    small = engine.backends["small"]
    for labels, prompt, traj, drafts in token_net.labelled_examples(engine, by_id, data, group):
        dist, hid, top = forced_features(small, prompt, traj, drafts)
        for name, col in labels.items():
            cols[name].append(col)
        cols["dist"].append(dist)
        cols["hidden"].append(hid)
        cols["match"].append(top == drafts)
    return {k: torch.cat(v) for k, v in cols.items()}


# 2. Training


def target_rows(cols: dict, target: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, labels in {0., 1.}) of `target`: oracle, every row; citer, the rows a label
    decided."""
    if target == "oracle":
        return torch.arange(len(cols["oracle"])), cols["oracle"].float()
    if target == "citer":
        known = torch.nonzero(cols["label"] >= 0).flatten()
        return known, cols["label"][known].float()
    raise UserError(f"unknown target {target!r}; valid: {', '.join(TARGETS)}")


def example_parts(groups: torch.Tensor, fit: FitConfig) -> torch.Tensor:
    """Per row: 0 fit, 1 validation (early stopping), 2 held out (the reported AUCs); whole
    examples go to one part, drawn with `fit.seed`. Needs three examples at least."""
    ex = torch.unique(groups)
    if len(ex) < 3:
        raise UserError(
            f"need at least 3 labelled examples to fit, validate and hold out; got {len(ex)}"
        )
    g = torch.Generator().manual_seed(fit.seed)
    ex = ex[torch.randperm(len(ex), generator=g)]
    n_held = max(1, round(fit.heldout_fraction * len(ex)))
    n_val = max(1, round(fit.val_fraction * len(ex)))
    part = torch.zeros(len(groups), dtype=torch.long)
    part[torch.isin(groups, ex[:n_held])] = 2
    part[torch.isin(groups, ex[n_held : n_held + n_val])] = 1
    return part


def _inputs(cols: dict, inputs):
    return lambda idx: (
        cols["dist"][idx] if "dist" in inputs else None,
        cols["hidden"][idx].float() if "hidden" in inputs else None,
        cols["draft"][idx],
    )


def predict(net: LearnedNet, cols: dict, idx: torch.Tensor, batch: int = 4096) -> torch.Tensor:
    """P(small suffices) of rows `idx`."""
    return token_net.predict(net, _inputs(cols, net.inputs), idx, batch)


def fit_net(cols: dict, rows, y, part, fit: FitConfig, log_path=None, progress=True):
    """BCE training of `LearnedNet` (Adam) on the rows of part 0 with early stopping on part 1.
    Returns (the best network by validation loss, stats)."""
    split = token_net.fitting_rows(rows, y, part)
    torch.manual_seed(fit.seed)
    net = LearnedNet(fit.inputs, cols["hidden"].shape[1], fit.buckets, fit.width, fit.dropout)
    dist = cols["dist"][split[0]]
    net.feature_mean.copy_(dist.mean(0))
    net.feature_std.copy_(dist.std(0).clamp(min=1e-6))
    opt = torch.optim.Adam(net.parameters(), lr=fit.lr, weight_decay=fit.weight_decay)
    inputs = _inputs(cols, net.inputs)
    return token_net.fit_epochs(net, opt, inputs, split, fit, log_path=log_path, progress=progress)


# 3. Held-out comparison with the thresholds' signals


def baseline_scores(cols: dict, idx: torch.Tensor) -> dict:
    """The training-free routers' signals oriented as P(small suffices) (higher keeps small):
    entropy -> minus small's entropy, confidence -> small's top-1 probability."""
    dist = cols["dist"][idx]
    return {
        "entropy": -dist[:, FEATURES.index("entropy")],
        "confidence": dist[:, FEATURES.index("top1_prob")],
    }


def compare_scores(scores: dict, y, groups, reps: int = 1000, seed: int = 0) -> dict:
    """Per scorer (name -> [n] scores, higher = small suffices) on the same rows: AUC against
    `y` with a 95% bootstrap interval (examples resampled with all their positions), the paired
    difference of the first scorer's AUC minus each other's (same resamples); per deferral
    share s the share of large-needed rows (y = 0) among the s lowest-scored (recall), and the
    rows the first scorer defers and another does not, and the reverse (`disagreements`)."""
    names = list(scores)
    rows = [torch.nonzero(groups == e).flatten() for e in torch.unique(groups)]
    g = torch.Generator().manual_seed(seed)
    draws = {n: [] for n in names}
    for _ in range(reps):
        pick = torch.randint(0, len(rows), (len(rows),), generator=g).tolist()
        r = torch.cat([rows[i] for i in pick])
        for n in names:
            draws[n].append(auc(scores[n][r], y[r]))
    draws = {n: torch.tensor(v, dtype=torch.float64) for n, v in draws.items()}

    def interval(v):
        v = v[~torch.isnan(v)]  # a resample with one class has no AUC
        return [float(v.quantile(0.025)), float(v.quantile(0.975))] if len(v) else [None, None]

    out = {"rows": len(y), "examples": len(rows), "large_needed": int((y == 0).sum()), "auc": {}}
    for n in names:
        out["auc"][n] = {"value": auc(scores[n], y), "ci95": interval(draws[n])}
    first = names[0]
    out["auc_difference"] = {
        f"{first}-{n}": {
            "value": out["auc"][first]["value"] - out["auc"][n]["value"],
            "ci95": interval(draws[first] - draws[n]),
        }
        for n in names[1:]
    }
    out["recall_at_share"] = {
        str(s): {n: recall_at_share(scores[n], y, s) for n in names} for s in SHARES
    }
    out["disagreements"] = {
        str(s): {n: disagreements(scores[first], scores[n], y, s) for n in names[1:]}
        for s in SHARES
    }
    return out


def disagreements(a, b, y, share: float) -> dict:
    """Where two scorers deferring the same `share` of rows (their lowest-scored) differ: how
    many rows only `a` defers and only `b` defers, and the share of each set whose label says
    large was needed (y = 0). Example: a defers {1, 2}, b {2, 3}, y[1] = 0, y[3] = 1 ->
    only_a 1 row, all needing large; only_b 1 row, none."""
    n = int(round(share * len(y)))
    da = set(torch.argsort(a, stable=True)[:n].tolist())
    db = set(torch.argsort(b, stable=True)[:n].tolist())

    def part(rows: set) -> dict:
        idx = torch.tensor(sorted(rows), dtype=torch.long)
        need = float((y[idx] == 0).float().mean()) if len(idx) else float("nan")
        return {"rows": len(rows), "large_needed": need}

    return {"only_first": part(da - db), "only_other": part(db - da), "both": len(da & db)}


def recall_at_share(scores, y, share: float) -> float:
    """Share of the rows with y = 0 among the `share` of rows scored lowest (what a router
    deferring that share of these tokens would catch); NaN without such rows."""
    n = int(round(share * len(y)))
    neg = int((y == 0).sum())
    if neg == 0:
        return float("nan")
    low = torch.argsort(scores, stable=True)[:n]
    return float((y[low] == 0).sum()) / neg


# 4. Overhead per token, beside small alone


def overhead(engine, router, prompts: list[list[int]], tokens: int, rounds: int = 3) -> dict:
    """ms per emitted token, unbatched, of small alone, the entropy router and `router`, each at
    a threshold that never defers (so all three emit small's tokens): `rounds` interleaved
    passes over `prompts` after one warm-up generation each; the median round is reported."""
    never = LearnedRouter(router.path, threshold=-math.inf, draft_len=router.draft_len)
    contenders = {"small": SmallOnly(), "entropy": EntropyRouter(math.inf), "learned": never}
    cfg = DecodeConfig(max_new_tokens=tokens, eos_ids=engine.eos_ids)
    for r in contenders.values():
        engine.generate(r, prompts[0], cfg)  # warm-up
    per_round = {n: [] for n in contenders}
    emitted = {}
    for _ in range(rounds):
        for name, r in contenders.items():
            gens = [engine.generate(r, p, cfg) for p in prompts]
            n = sum(len(g.token_ids) for g in gens)
            per_round[name].append(1000 * sum(g.seconds for g in gens) / max(1, n))
            emitted[name] = [list(g.token_ids) for g in gens]
    ms = {n: median(v) for n, v in per_round.items()}
    return {
        "prompts": len(prompts),
        "max_new_tokens": tokens,
        "tokens": sum(map(len, emitted["small"])),
        "rounds": rounds,
        "ms_per_token": ms,
        "ratio_to_small": {n: v / ms["small"] for n, v in ms.items()},
        "same_tokens": emitted["learned"] == emitted["small"] == emitted["entropy"],
        "models": {r: b.info.source for r, b in engine.backends.items()},
        "threads": torch.get_num_threads(),
    }


@dataclass(frozen=True)
class LearnedSpec(token_net.TokenNetSpec):
    """One `hybridbench train-learned`: a token net's training (`TokenNetSpec`) and, without a
    label file, how its labels are made here; the router's overhead timed on calib prompts."""

    train_limit: int = 40  # labels made here: the first N train examples
    mode: str = "label_free"  # labels made here: reference | label_free
    trajectories: str | None = None  # label_free: a small-only train run's records
    max_rollouts: int = 2  # labels made here: rolled-out positions per example
    rollout_tokens: int = 0  # one rollout's budget (0: the task's)
    max_new_tokens: int = 0  # budget of the answers decoded here (0: the task's)
    overhead: int = 0  # time the router on N calib prompts (0: not timed)
    overhead_tokens: int = 64  # tokens per timed prompt


# The command


def train(spec: LearnedSpec, fit: FitConfig) -> int:
    """The command: labels (read or made), features, fit, metrics.json, overhead.json."""
    token_net.check_target_share(spec.target_share)
    task = get_task(spec.task, **spec.task_args)
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    if spec.labels and not Path(spec.labels).is_file():
        raise UserError(f"label file not found: {spec.labels}")
    engine = engine_from_args(spec.models)
    data, labels_path = _labels(engine, task, spec, out)
    token_net.check_labels(data, labels_path, task, spec.split_seed)
    digest = file_sha256(labels_path)
    identity = token_net.identity_of(digest, spec.target, fit)
    ckpt_path = out / "learned.pt"
    finished = token_net.trained_already(ckpt_path, identity)
    if not finished:
        cols = build_features(engine, task, data, digest, Path(spec.features or out / "features"))
        _fit_and_save(engine, task, data, cols, fit, spec, identity, labels_path)
    router = LearnedRouter(str(ckpt_path))
    measure = spec.overhead and not _measured(out / "overhead.json", spec)
    if finished and not measure:
        nothing_to_do()  # a finished run re-invoked: no line in cost.jsonl
    if measure:
        calib = task.split("calib", seed=spec.split_seed)[: spec.overhead]
        prompts = [engine.encode(ex.messages) for ex in calib]
        report = overhead(engine, router, prompts, spec.overhead_tokens)
        (out / "overhead.json").write_text(json.dumps(report, indent=1) + "\n")
        ratio = report["ratio_to_small"]
        say = f"x{ratio['learned']:.3f} small alone's ms/token (entropy x{ratio['entropy']:.3f})"
        print(f"overhead: {say} -> {out / 'overhead.json'}", file=sys.stderr)
    print(f"router: {ckpt_path}")
    return 0


def _labels(engine, task, spec: LearnedSpec, out: Path):
    """(labels, path): the file given with --labels, else labels made here (resumable)."""
    if spec.labels:
        return TokenLabels.load(spec.labels), Path(spec.labels)
    train, _ = train_calib(task, spec.split_seed, spec.train_limit, None, 3)
    ids = [e.id for e in train]
    cfg = label_config(spec)
    path = out / "labels.safetensors"
    if path.exists():  # finished: read as it is (build_labels would make its hidden states again)
        data = TokenLabels.load(path)
        if data.meta.get("config") == asdict(cfg) and set(data.meta["done"]) >= set(ids):
            return data, path
    trajectories = _read_trajectories(spec.trajectories) if spec.trajectories else None
    data = build_labels(
        engine, task, train, cfg, path, split_seed=spec.split_seed, trajectories=trajectories
    )
    return data, path


def _fit_and_save(engine, task, data, cols, fit, spec, identity, labels_path) -> None:
    rows, y = target_rows(cols, spec.target)
    groups = cols["example"][rows]
    part = example_parts(groups, fit)
    net, stats = fit_net(cols, rows, y, part, fit, log_path=Path(spec.out) / "train_log.jsonl")
    held = rows[part == 2]
    scores = {"learned": predict(net, cols, held), **baseline_scores(cols, held)}
    report = compare_scores(scores, y[part == 2], groups[part == 2], spec.bootstrap, fit.seed)
    report |= {
        "target": spec.target,
        "labels": str(labels_path),
        "inputs": list(fit.inputs),
        "argmax_match": float(cols["match"].float().mean()),  # same model and backend: ~1
        "training": stats,
    }
    config = {
        "inputs": fit.inputs,
        "hidden_size": int(cols["hidden"].shape[1]),
        "buckets": fit.buckets,
        "width": fit.width,
        "dropout": fit.dropout,
    }
    run = (spec, engine, task, data, cols, identity, labels_path)
    token_net.save_router("learned", net, config, report, scores["learned"], stats, run)


def _measured(path: Path, spec: LearnedSpec) -> bool:
    """overhead.json holds a measurement with these settings already."""
    rep = json.loads(path.read_text()) if path.exists() else {}
    return (rep.get("prompts"), rep.get("max_new_tokens")) == (spec.overhead, spec.overhead_tokens)
