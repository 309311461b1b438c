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

from dataclasses import dataclass
from pathlib import Path

import torch

from harness.backends.engine import engine_from_args
from harness.core.forcing import FORCED_CHUNK, forced_passes
from harness.errors import UserError
from harness.files import file_sha256
from harness.training import critical, token_net
from harness.training.common import nothing_to_do
from harness.training.labels import TokenLabels
from harness.training.learned import baseline_scores, compare_scores, example_parts
from harness.training.token_net import labelled_examples
from routers.learned import distribution_features
from routers.r2r import TOP_K, R2RNet, top_logprobs
from tasks import get_task

FEATURES_SCHEMA = "hybridbench.r2r_features/1"
TARGETS = ("critical", "oracle")


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
    for labels, prompt, traj, drafts in labelled_examples(engine, by_id, data, group):
        at = 0
        for logits, h in forced_passes(small, prompt, traj.tolist(), chunk, hidden=True):
            k = len(logits)
            cols["top"].append(top_logprobs(logits))
            cols["dist"].append(distribution_features(logits, drafts[at : at + k]))
            cols["hidden"].append(h.to(torch.bfloat16))
            cols["match"].append(logits.argmax(-1) == drafts[at : at + k])
            at += k
        for name, col in labels.items():
            cols[name].append(col)
    return {k: torch.cat(v) for k, v in cols.items()}


def target_rows(cols: dict, target: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, labels in {0., 1.}): critical, the rows a label decided; oracle, every row."""
    if target == "oracle":
        return torch.arange(len(cols["oracle"])), cols["oracle"].float()
    if target == "critical":
        known = torch.nonzero(cols["label"] >= 0).flatten()
        return known, cols["label"][known].float()
    raise UserError(f"unknown target {target!r}; valid: {', '.join(TARGETS)}")


def _inputs(cols: dict):
    return lambda idx: (cols["top"][idx].float(), cols["hidden"][idx].float(), cols["draft"][idx])


def predict(net: R2RNet, cols: dict, idx: torch.Tensor, batch: int = 4096) -> torch.Tensor:
    """P(small suffices) of rows `idx`."""
    return token_net.predict(net, _inputs(cols), idx, batch)


def _weights(y: torch.Tensor, balance: bool) -> torch.Tensor:
    """Per row loss weight: with `balance`, each label's rows weigh half of the total."""
    if not balance:
        return torch.ones_like(y)
    n1, n0 = float(y.sum()), float(len(y) - y.sum())
    return torch.where(y > 0.5, len(y) / (2 * max(n1, 1.0)), len(y) / (2 * max(n0, 1.0)))


def fit_net(cols: dict, rows, y, part, fit: FitConfig, log_path=None, progress=True):
    """Weighted BCE training of `R2RNet` (AdamW) on the rows of part 0, early stopping on part
    1's loss. Returns (the best network by validation loss, stats)."""
    split = token_net.fitting_rows(rows, y, part)
    torch.manual_seed(fit.seed)
    hidden = int(cols["hidden"].shape[1])
    net = R2RNet(hidden, TOP_K, fit.buckets, fit.width, fit.blocks, fit.dropout)
    opt = torch.optim.AdamW(net.parameters(), lr=fit.lr, weight_decay=fit.weight_decay)
    weights = lambda y: _weights(y, fit.balance)  # noqa: E731
    return token_net.fit_epochs(net, opt, _inputs(cols), split, fit, weights, log_path, progress)


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


def train(spec: token_net.TokenNetSpec, fit: FitConfig) -> int:
    """The command: labels read, features, fit, metrics.json and the checkpoint."""
    token_net.check_target_share(spec.target_share)
    labels_path = Path(spec.labels)
    if not labels_path.is_file():
        raise UserError(f"label file not found: {spec.labels}")
    task = get_task(spec.task, **spec.task_args)
    out = Path(spec.out)
    data = TokenLabels.load(labels_path)
    token_net.check_labels(data, labels_path, task, spec.split_seed)
    digest = file_sha256(labels_path)
    identity = token_net.identity_of(digest, spec.target, fit)
    ckpt_path = out / "r2r.pt"
    if token_net.trained_already(ckpt_path, identity):
        nothing_to_do()
        print(f"router: {ckpt_path}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    engine = engine_from_args(spec.models)
    folder = Path(spec.features or out / "features")
    cols = token_net.build_features(
        engine, task, data, digest, folder, FEATURES_SCHEMA, features_of
    )
    rows, y = target_rows(cols, spec.target)
    part = example_parts(cols["example"][rows], fit)
    net, stats = fit_net(cols, rows, y, part, fit, log_path=out / "train_log.jsonl")
    report = held_out_report(net, cols, rows, y, part, spec.target, spec.bootstrap, fit.seed)
    scores = report.pop("threshold_scores")
    report |= {"target": spec.target, "labels": str(labels_path), "training": stats}
    report["argmax_match"] = float(cols["match"].float().mean())  # same model and backend: ~1
    if data.meta.get("mode") == "critical":  # what a critical-only oracle would defer there
        held = torch.unique(cols["example"][rows[part == 2]]).tolist()
        report["heldout_labels"] = critical.stats(data, held)
    config = {"hidden_size": int(cols["hidden"].shape[1]), "top_k": TOP_K}
    config |= {k: getattr(fit, k) for k in ("buckets", "width", "blocks", "dropout")}
    run = (spec, engine, task, data, cols, identity, labels_path)
    print(f"router: {token_net.save_router('r2r', net, config, report, scores, stats, run)}")
    return 0
