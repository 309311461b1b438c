"""`hybridbench train-r2r`: the `r2r` token router (routers/r2r.py) trained on R2R's critical-
divergence labels (harness/training/critical.py: the verifier is the task's scorer, not an LLM
judge); its held-out AUC beside entropy's and confidence's on the same tokens.

    hybridbench r2r-labels --task gsm8k --examples 200 --positions 3 --out runs/r2r/labels-gsm8k
    hybridbench train-r2r --task gsm8k --labels runs/r2r/labels-gsm8k/labels.safetensors \\
        --out runs/r2r/gsm8k                      # --target critical (default)
    hybridbench train-r2r ... --target oracle --features runs/r2r/gsm8k/features \\
        --out runs/r2r/gsm8k-every                # ablation: every divergence, AUCs only

`--target critical`: the label file's own labels (1 where small's token is large's or its
divergence was neutral, 0 where critical; divergences not rolled out are not trained on);
`oracle`: every divergence (1 where small's greedy token equals large's). The ablation with the
`learned` network on the critical labels is `hybridbench train-learned --target citer --labels
FILE`. Into --out, each step kept so that a rerun resumes:

  features/NNNN.hidden.safetensors  small's teacher-forced pass along the labels' trajectories,
                          32 examples a file: top-100 log-probabilities, distribution features
                          (entropy's and confidence's signals), hidden states, labels
  r2r.pt, train_log.jsonl  the network (best validation loss), its default threshold, ids
  metrics.json            `compare_scores` on the held-out examples: r2r, entropy, confidence;
                          with --target oracle also against the critical labels (`on_critical`);
                          `heldout_labels`: the held-out examples' divergences, critical share
                          and the share of tokens a critical-only oracle would defer

The examples are split as train-learned splits them (the same seed gives the same held-out
examples, so the AUCs of both commands on one label file are on the same tokens).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from harness.backends.engine import engine_from_args
from harness.core.forcing import FORCED_CHUNK, forced_passes
from harness.errors import UserError
from harness.files import file_sha256
from harness.training import critical
from harness.training.common import EarlyStopping, auc, nothing_to_do, provenance
from harness.training.labels import TokenLabels, _bar, _write
from harness.training.learned import baseline_scores, compare_scores, example_parts
from routers import parse_args
from routers.calibration import calibrated_threshold
from routers.learned import distribution_features
from routers.r2r import TOP_K, R2RNet, top_logprobs
from tasks import get_task

FEATURES_SCHEMA = "hybridbench.r2r_features/1"
TARGETS = ("critical", "oracle")
GROUP = 32  # examples per features file: a resumed step redoes at most this many


@dataclass(frozen=True)
class FitConfig:
    """The network and its optimisation (AdamW, weighted BCE, early stopping on validation)."""

    width: int = 128  # each input's projection and the blocks' width
    blocks: int = 2  # residual MLP blocks
    buckets: int = 4096  # drafted-token embedding rows (id modulo buckets)
    dropout: float = 0.1
    epochs: int = 20  # upper bound on passes over the fitting rows
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 256
    patience: int = 3  # epochs without a better validation loss before stopping
    balance: bool = True  # weigh both labels equally in the loss (critical rows are rare)
    val_fraction: float = 0.1  # share of the label file's examples for early stopping
    heldout_fraction: float = 0.2  # share of its examples for the reported AUCs
    seed: int = 0  # seeds the example split, initialisation and batch order


@torch.inference_mode()
def features_of(engine, by_id: dict, data: TokenLabels, group: list[int], chunk=FORCED_CHUNK):
    """The columns of the examples `group` (indices into the label file's ids), small teacher-
    forced along their trajectories: example, draft (small's greedy token there), top [N, TOP_K],
    dist [N, F], hidden [N, H] bf16, label, oracle (small's token equals large's), match."""
    cols = {k: [] for k in ("example", "draft", "top", "dist", "hidden", "label", "oracle")}
    cols["match"] = []
    small = engine.backends["small"]
    for j in group:
        ex_id = data.example_ids[j]
        if ex_id not in by_id:
            raise UserError(f"{ex_id} of the label file is not an example of the task")
        rows = data.rows_of(j)
        traj, drafts = data["context_token"][rows], data["small_token"][rows]
        prompt = engine.encode(by_id[ex_id].messages)
        at = 0
        for logits, h in forced_passes(small, prompt, traj.tolist(), chunk, hidden=True):
            k = len(logits)
            cols["top"].append(top_logprobs(logits))
            cols["dist"].append(distribution_features(logits, drafts[at : at + k]))
            cols["hidden"].append(h.to(torch.bfloat16))
            cols["match"].append(logits.argmax(-1) == drafts[at : at + k])
            at += k
        cols["example"].append(torch.full((len(rows),), j, dtype=torch.int32))
        cols["draft"].append(drafts)
        cols["label"].append(data["label"][rows])
        cols["oracle"].append((drafts == data["large_token"][rows]).to(torch.int8))
    return {k: torch.cat(v) for k, v in cols.items()}


def build_features(engine, task, data, digest: str, folder: Path, progress=True) -> dict:
    """`features_of` every finished example of `data`, kept GROUP examples a file in `folder`
    (files of these labels already there are read, not made again)."""
    from safetensors import safe_open

    by_id = {ex.id: ex for ex in task.load()}
    done = set(data.meta.get("done", []))
    order = [j for j, i in enumerate(data.example_ids) if i in done]
    if not order:
        raise UserError("the label file holds no finished example")
    folder.mkdir(parents=True, exist_ok=True)
    parts, bar = [], _bar(len(order), "features", progress)
    for s in range(0, len(order), GROUP):
        group = order[s : s + GROUP]
        path = folder / f"{s // GROUP:04d}.hidden.safetensors"
        meta = {"schema": FEATURES_SCHEMA, "labels": digest}
        meta["examples"] = [data.example_ids[j] for j in group]
        if path.exists():
            with safe_open(str(path), framework="pt") as f:
                if {k: json.loads(v) for k, v in (f.metadata() or {}).items()} != meta:
                    raise UserError(f"{path} holds features of other labels; give another folder")
                cols = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        else:
            cols = features_of(engine, by_id, data, group)
            _write(path, cols, meta)
        parts.append(cols)
        bar and bar.update(len(group))
    bar and bar.close()
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def target_rows(cols: dict, target: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, labels in {0., 1.}): critical, the rows a label decided; oracle, every row."""
    if target == "oracle":
        return torch.arange(len(cols["oracle"])), cols["oracle"].float()
    if target == "critical":
        known = torch.nonzero(cols["label"] >= 0).flatten()
        return known, cols["label"][known].float()
    raise UserError(f"unknown target {target!r}; valid: {', '.join(TARGETS)}")


def _inputs(cols: dict, idx: torch.Tensor) -> tuple:
    return cols["top"][idx].float(), cols["hidden"][idx].float(), cols["draft"][idx]


@torch.no_grad()
def predict(net: R2RNet, cols: dict, idx: torch.Tensor, batch: int = 4096) -> torch.Tensor:
    """P(small suffices) of rows `idx`."""
    net.eval()
    out = [
        torch.sigmoid(net(*_inputs(cols, idx[s : s + batch]))) for s in range(0, len(idx), batch)
    ]
    return torch.cat(out) if out else torch.zeros(0)


def _weights(y: torch.Tensor, balance: bool) -> torch.Tensor:
    """Per row loss weight: with `balance`, each label's rows weigh half of the total."""
    if not balance:
        return torch.ones_like(y)
    n1, n0 = float(y.sum()), float(len(y) - y.sum())
    return torch.where(y > 0.5, len(y) / (2 * max(n1, 1.0)), len(y) / (2 * max(n0, 1.0)))


def fit_net(cols: dict, rows, y, part, fit: FitConfig, log_path=None, progress=True):
    """Weighted BCE training of `R2RNet` on the rows of part 0, early stopping on part 1's
    loss. Returns (the best network by validation loss, stats)."""
    fit_rows, val_rows, y_fit, y_val = rows[part == 0], rows[part == 1], y[part == 0], y[part == 1]
    if len(torch.unique(y_fit)) < 2:
        raise UserError("the fitting rows have one label only: nothing to learn")
    torch.manual_seed(fit.seed)
    g = torch.Generator().manual_seed(fit.seed)
    hidden = int(cols["hidden"].shape[1])
    net = R2RNet(hidden, TOP_K, fit.buckets, fit.width, fit.blocks, fit.dropout)
    opt = torch.optim.AdamW(net.parameters(), lr=fit.lr, weight_decay=fit.weight_decay)
    w_fit, w_val = _weights(y_fit, fit.balance), _weights(y_val, fit.balance)
    early, epoch = EarlyStopping(fit.patience, log_path, progress), 0
    for epoch in range(1, fit.epochs + 1):
        net.train()
        order, total = torch.randperm(len(fit_rows), generator=g), 0.0
        for s in range(0, len(order), fit.batch_size):
            b = order[s : s + fit.batch_size]
            logit = net(*_inputs(cols, fit_rows[b]))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logit, y_fit[b], weight=w_fit[b]
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(b)
        p = predict(net, cols, val_rows).clamp(1e-7, 1 - 1e-7)
        val_loss = float(torch.nn.functional.binary_cross_entropy(p, y_val, weight=w_val))
        row = {"epoch": epoch, "train_loss": total / len(fit_rows), "val_loss": val_loss}
        row["val_auc"] = auc(p, y_val)
        if early.stop(net, row, val_loss):
            break
    net.load_state_dict(early.best_state)
    stats = {"fit_rows": len(fit_rows), "val_rows": len(val_rows), "epochs": epoch}
    return net.eval(), stats | {"val_loss": early.best}


def held_out_report(net, cols, rows, y, part, target: str, bootstrap: int, seed: int) -> dict:
    """compare_scores of r2r, entropy and confidence on the held-out rows; with --target oracle
    also on the held-out rows the critical labels decided (`on_critical`)."""
    held = rows[part == 2]
    scores = {"r2r": predict(net, cols, held), **baseline_scores(cols, held)}
    groups = cols["example"][held]
    report = compare_scores(scores, y[part == 2], groups, bootstrap, seed)
    if target != "critical":
        known = held[cols["label"][held] >= 0]
        if len(known) and len(torch.unique(cols["label"][known])) == 2:
            on = {"r2r": predict(net, cols, known), **baseline_scores(cols, known)}
            lab = cols["label"][known].float()
            report["on_critical"] = compare_scores(on, lab, cols["example"][known], bootstrap, seed)
    return report | {"threshold_scores": scores["r2r"]}


def train(args, fit: FitConfig) -> int:
    """The command: labels read, features, fit, metrics.json and the checkpoint."""
    if not 0 < args.target_share < 1:
        raise UserError(f"--target-share must be in (0, 1), got {args.target_share}")
    labels_path = Path(args.labels)
    if not labels_path.is_file():
        raise UserError(f"label file not found: {args.labels}")
    task = get_task(args.task, **parse_args(args.task_arg))
    out = Path(args.out)
    data = TokenLabels.load(labels_path)
    if data.meta.get("task") != task.name:
        raise UserError(f"{labels_path} labels task {data.meta.get('task')!r}, not {task.name!r}")
    split = (data.meta.get("split"), data.meta.get("split_seed"))
    if split != ("train", args.split_seed):
        raise UserError(f"{labels_path} labels split {split}, not ('train', {args.split_seed})")
    digest = file_sha256(labels_path)
    identity = {"labels_sha256": digest, "target": args.target, "fit": asdict(fit)}
    ckpt_path = out / "r2r.pt"
    if ckpt_path.exists():
        if torch.load(ckpt_path, weights_only=True).get("identity") != identity:
            raise UserError(
                f"{ckpt_path} was trained with other labels or settings; use another --out"
            )
        nothing_to_do()
        print(f"router: {ckpt_path}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    engine = engine_from_args(args)
    want = data.meta.get("models", {}).get("small", {}).get("sha256")
    have = engine.backends["small"].info.sha256
    if want and have and want != have:
        raise UserError("the label file was made with another small model than the one given")
    cols = build_features(engine, task, data, digest, Path(args.features or out / "features"))
    rows, y = target_rows(cols, args.target)
    part = example_parts(cols["example"][rows], fit)
    net, stats = fit_net(cols, rows, y, part, fit, log_path=out / "train_log.jsonl")
    report = held_out_report(net, cols, rows, y, part, args.target, args.bootstrap, fit.seed)
    scores = report.pop("threshold_scores")
    report |= {"target": args.target, "labels": str(labels_path), "training": stats}
    report["argmax_match"] = float(cols["match"].float().mean())  # same model and backend: ~1
    if data.meta.get("mode") == "critical":  # what a critical-only oracle would defer there
        held = torch.unique(cols["example"][rows[part == 2]]).tolist()
        report["heldout_labels"] = critical.stats(data, held)
    used = sorted({data.example_ids[int(j)] for j in torch.unique(cols["example"])})
    common = provenance(engine, task, args.split_seed, [], [])
    # metrics first: a checkpoint on disk means its step is complete (a rerun skips it)
    (out / "metrics.json").write_text(json.dumps(report, indent=1) + "\n")
    config = {"hidden_size": int(cols["hidden"].shape[1]), "top_k": TOP_K}
    config |= {k: getattr(fit, k) for k in ("buckets", "width", "blocks", "dropout")}
    ckpt = {"kind": "r2r", "config": config, "state_dict": net.state_dict()}
    # tau deferring the target share of the held-out train tokens (along large's answers); a
    # calibration file gives the one along small's own answers
    ckpt["threshold"] = calibrated_threshold(scores, args.target_share)
    ckpt |= {"target_share": args.target_share, "identity": identity, "target": args.target}
    ckpt |= {
        "labels": str(labels_path),
        "stats": stats | {"heldout_auc": report["auc"]["r2r"]["value"]},
    }
    ckpt |= {k: v for k, v in common.items() if k not in ("train_ids", "calib_ids")}
    torch.save(ckpt | {"train_ids": used}, ckpt_path)
    aucs = ", ".join(f"{n} {v['value']:.3f} {v['ci95']}" for n, v in report["auc"].items())
    print(f"held-out AUC: {aucs} ({report['examples']} examples)", file=sys.stderr)
    print(f"router: {ckpt_path}")
    return 0
