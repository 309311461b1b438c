"""The steps `train-learned` and `train-r2r` share to train a token router's network on a token
label file: the label file checked against the task and the small model, small's features kept
GROUP examples a file (a rerun reads them), the fitting loop with early stopping, and the
checkpoint with its default threshold, written after metrics.json."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from harness.backends.model_spec import ModelSpec
from harness.errors import UserError
from harness.training.common import EarlyStopping, auc, provenance
from harness.training.labels import _bar, _write
from routers.calibration import calibrated_threshold

GROUP = 32  # examples per features file: a resumed step redoes at most this many


@dataclass(frozen=True)
class TokenNetSpec:
    """One training of a token router's network on a token label file (`hybridbench
    train-learned`, `train-r2r`): which task's labels, where, the default threshold's share and
    the held-out report's resamples, on which pair."""

    task: str  # task name, import path or entry point (its train split labelled the tokens)
    out: str  # folder for features, checkpoint and metrics (a finished checkpoint is kept)
    task_args: Mapping = field(default_factory=dict)  # the task's keyword arguments
    labels: str | None = None  # the token label file (None: the command makes its own)
    target: str = "oracle"  # which labels the network learns (the command's TARGETS)
    features: str | None = None  # small's features along the labels (None: OUT/features)
    split_seed: int = 0  # the hashed split's seed
    target_share: float = 0.2  # the default threshold defers this share of held-out tokens
    bootstrap: int = 1000  # resamples of the held-out AUC intervals
    seed: int = 0  # seeds labelling (where labels are made here) and fitting
    models: ModelSpec = ModelSpec(batch="auto")  # the pair whose small reads the features


def check_target_share(share: float) -> None:
    if not 0 < share < 1:
        raise UserError(f"--target-share must be in (0, 1), got {share}")


def check_labels(data, labels_path, task, split_seed: int) -> None:
    """One error line when the label file labels another task or split than the one given."""
    if data.meta.get("task") != task.name:
        raise UserError(f"{labels_path} labels task {data.meta.get('task')!r}, not {task.name!r}")
    split = (data.meta.get("split"), data.meta.get("split_seed"))
    if split != ("train", split_seed):  # calib and test are drawn with --split-seed
        raise UserError(f"{labels_path} labels split {split}, not ('train', {split_seed})")


def identity_of(digest: str, target: str, fit) -> dict:
    """What a checkpoint was trained from: a rerun with other labels or settings is refused."""
    return {"labels_sha256": digest, "target": target, "fit": asdict(fit)}


def trained_already(ckpt_path: Path, identity: dict) -> bool:
    """Whether `ckpt_path` holds the network of `identity` (one error line when it holds
    another's)."""
    if not ckpt_path.exists():
        return False
    if torch.load(ckpt_path, weights_only=True).get("identity") != identity:
        raise UserError(f"{ckpt_path} was trained with other labels or settings; use another --out")
    return True


def check_small_model(data, engine) -> None:
    want = data.meta.get("models", {}).get("small", {}).get("sha256")
    have = engine.backends["small"].info.sha256
    if want and have and want != have:
        raise UserError("the label file was made with another small model than the one given")


def build_features(
    engine, task, data, digest: str, folder: Path, schema: str, features_of, progress=True
) -> dict:
    """`features_of(engine, by_id, data, group)` of every finished example of the label file
    `data` (examples in file order), kept GROUP examples a file in `folder`, its metadata naming
    `schema`, the labels' `digest` and the examples; files of these labels already there are
    read, not made again."""
    check_small_model(data, engine)
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
        meta = {"schema": schema, "labels": digest}
        meta["examples"] = [data.example_ids[j] for j in group]
        if path.exists():
            cols = _read_features(path, meta)
        else:
            cols = features_of(engine, by_id, data, group)
            _write(path, cols, meta)
        parts.append(cols)
        bar and bar.update(len(group))
    bar and bar.close()
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def _read_features(path: Path, meta: dict) -> dict:
    from safetensors import safe_open  # (as labels.py: imported when a file is read)

    with safe_open(str(path), framework="pt") as f:
        if {k: json.loads(v) for k, v in (f.metadata() or {}).items()} != meta:
            raise UserError(f"{path} holds features of other labels; give another folder")
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118


def labelled_examples(engine, by_id: dict, data, group: list[int]):
    """Per example j of `group` (indices into the label file's ids): (its label columns:
    example, draft (small's greedy token), label (the file's), oracle (small's token equals
    large's); small's prompt ids; the trajectory; the drafted tokens)."""
    for j in group:
        ex_id = data.example_ids[j]
        if ex_id not in by_id:
            raise UserError(f"{ex_id} of the label file is not an example of the task")
        rows = data.rows_of(j)
        traj, drafts = data["context_token"][rows], data["small_token"][rows]
        labels = {
            "example": torch.full((len(rows),), j, dtype=torch.int32),
            "draft": drafts,
            "label": data["label"][rows],
            "oracle": (drafts == data["large_token"][rows]).to(torch.int8),
        }
        yield labels, engine.encode(by_id[ex_id].messages), traj, drafts


@torch.no_grad()
def predict(net, inputs, idx: torch.Tensor, batch: int = 4096) -> torch.Tensor:
    """P(small suffices) of rows `idx`; `inputs(rows)` gives the network's arguments."""
    net.eval()
    out = [torch.sigmoid(net(*inputs(idx[s : s + batch]))) for s in range(0, len(idx), batch)]
    return torch.cat(out) if out else torch.zeros(0)


def fitting_rows(rows, y, part) -> tuple:
    """(fit rows, validation rows, their labels): parts 0 and 1 of `example_parts`."""
    fit_rows, val_rows, y_fit, y_val = rows[part == 0], rows[part == 1], y[part == 0], y[part == 1]
    if len(torch.unique(y_fit)) < 2:
        raise UserError("the fitting rows have one label only: nothing to learn")
    return fit_rows, val_rows, y_fit, y_val


def fit_epochs(net, opt, inputs, split: tuple, fit, weights=None, log_path=None, progress=True):
    """BCE training of `net` (logits of P(small suffices)) on the fit rows of `split`
    (`fitting_rows`) in batches drawn with `fit.seed`, each row weighted by `weights(y)` when
    given, early stopping on the validation rows' loss. Returns (the best network by validation
    loss, stats)."""
    fit_rows, val_rows, y_fit, y_val = split
    g = torch.Generator().manual_seed(fit.seed)
    w_fit, w_val = (None, None) if weights is None else (weights(y_fit), weights(y_val))
    early, epoch = EarlyStopping(fit.patience, log_path, progress), 0
    for epoch in range(1, fit.epochs + 1):
        net.train()
        order, total = torch.randperm(len(fit_rows), generator=g), 0.0
        for s in range(0, len(order), fit.batch_size):
            b = order[s : s + fit.batch_size]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                net(*inputs(fit_rows[b])), y_fit[b], weight=None if w_fit is None else w_fit[b]
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(b)
        p = predict(net, inputs, val_rows).clamp(1e-7, 1 - 1e-7)
        val_loss = float(torch.nn.functional.binary_cross_entropy(p, y_val, weight=w_val))
        row = {"epoch": epoch, "train_loss": total / len(fit_rows), "val_loss": val_loss}
        row["val_auc"] = auc(p, y_val)
        if early.stop(net, row, val_loss):
            break
    net.load_state_dict(early.best_state)
    stats = {"fit_rows": len(fit_rows), "val_rows": len(val_rows), "epochs": epoch}
    return net.eval(), stats | {"val_loss": early.best}


def save_router(kind: str, net, config: dict, report: dict, scores, stats: dict, run) -> Path:
    """metrics.json (`report`), then OUT/KIND.pt: the network of `config`, its default threshold
    (deferring --target-share of the held-out train `scores`), what it was trained from and on;
    prints the held-out AUCs. `run`: (spec, engine, task, data, cols, identity, labels_path)."""
    spec, engine, task, data, cols, identity, labels_path = run
    used = sorted({data.example_ids[int(j)] for j in torch.unique(cols["example"])})
    common = provenance(engine, task, spec.split_seed, [], [])
    out = Path(spec.out)
    # metrics first: a checkpoint on disk means its step is complete (a rerun skips it)
    (out / "metrics.json").write_text(json.dumps(report, indent=1) + "\n")
    ckpt = {
        "kind": kind,
        "config": config,
        "state_dict": net.state_dict(),
        # tau deferring the target share of the held-out train tokens (teacher-forced along
        # the label file's trajectories); a calibration file gives the one along small's answers
        "threshold": calibrated_threshold(scores, spec.target_share),
        "target_share": spec.target_share,
        "identity": identity,
        "target": spec.target,
        "labels": str(labels_path),
        "stats": {**stats, "heldout_auc": report["auc"][kind]["value"]},
        **{k: v for k, v in common.items() if k not in ("train_ids", "calib_ids")},
        "train_ids": used,
    }
    torch.save(ckpt, out / f"{kind}.pt")

    def ci(lo, hi) -> str:  # None: no resample held both labels
        return "[n/a]" if lo is None else f"[{lo:.3f}, {hi:.3f}]"

    aucs = ", ".join(f"{n} {v['value']:.3f} {ci(*v['ci95'])}" for n, v in report["auc"].items())
    print(f"held-out AUC: {aucs} ({report['examples']} examples)", file=sys.stderr)
    return out / f"{kind}.pt"
