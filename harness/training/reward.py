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
from harness.training.common import nothing_to_do
from harness.training.reward_data import DATA_MANIFEST
from harness.training.reward_heads import (
    HEAD_DEFAULTS,
    Pairs,
    TrainConfig,
    by_length,
    by_task,
    evaluate,
    heldout_split,
    l2_search,
    score,
    select_l2,
    state_head,
    train_head,
)


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


# --- train-reward ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RewardSpec:
    """One `hybridbench train-reward`: the data, the backbone and head, how they are fitted."""

    data: str  # folder written by `hybridbench reward-data`
    out: str  # model folder (created, or resumed)
    backbone: str | None = None  # None: the data's small model
    layers: int = 6  # backbone depth (its first N layers)
    head: str = "linear"  # one of HEAD_DEFAULTS
    dtype: str = "bfloat16"  # the backbone's dtype (the pair's)
    holdout: float = 0.2  # share of prompts held out
    epochs: int | None = None  # None: the head's default
    lr: float | None = None  # None: the head's default
    l2: float | None = None  # None: chosen by cross-validation over the head's grid
    batch_size: int = TrainConfig.batch_size
    seed: int = 0  # seeds the hold-out split and the fit
    save_every: int = 50  # epochs between checkpoints
    threads: int | None = None  # torch CPU threads (None: torch's)


def _finished(out: Path, key: dict, cfg: TrainConfig, spec: RewardSpec) -> dict | None:
    """metrics.json of a finished run with these settings (the penalty aside when it is chosen
    by cross-validation), else None."""
    path = out / "metrics.json"
    if not (path.is_file() and (out / "reward.pt").is_file()):
        return None
    m = json.loads(path.read_text())
    saved, want = dict(m.get("config", {})), asdict(cfg)
    if spec.l2 is None:  # chosen by the same search (not by an older one)
        saved.pop("l2", None), want.pop("l2")
        grid = HEAD_DEFAULTS[spec.head]["l2_grid"]
        if m.get("l2_search") != l2_search(grid):
            return None
    same = all(m.get(k) == v for k, v in key.items())
    return m if same and saved == want and m.get("holdout") == spec.holdout else None


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


def _inputs(spec: RewardSpec) -> tuple[list[dict], str, dict]:
    """(preference records, backbone source, identity of the features) with user-facing checks."""
    from harness.backends import models
    from harness.training.reward_data import read_pairs

    data = Path(spec.data)
    records = read_pairs(data / "pairs.jsonl")
    if not records:
        raise UserError(
            f"no preference data in {data / 'pairs.jsonl'}; run hybridbench reward-data"
        )
    if not 0 < spec.holdout < 1:
        raise UserError(f"--holdout must be in (0, 1), got {spec.holdout}")
    if spec.threads:
        torch.set_num_threads(spec.threads)
    manifest = json.loads((data / DATA_MANIFEST).read_text())
    source = spec.backbone or manifest["model_sources"].get("small") or models.DEFAULT_SMALL
    if not Path(source).expanduser().exists() and source not in models.PACKAGED:
        raise UserError(f"backbone {source!r} is neither a packaged model nor a folder")
    data_sha = hashlib.sha256((data / "pairs.jsonl").read_bytes()).hexdigest()
    key = {"data_sha256": data_sha, "backbone": source, "layers": spec.layers, "dtype": spec.dtype}
    return records, source, key


def _fit(train: Pairs, test: Pairs, cfg: TrainConfig, path: Path, key: dict, every: int) -> dict:
    """`train_head` with a progress bar, a checkpoint every `every` epochs, and resume."""
    from tqdm import tqdm

    state = _resume(path, key)
    bar = tqdm(
        total=cfg.epochs,
        initial=state["epoch"] if state else 0,
        desc="train-reward",
        unit="epoch",
        file=sys.stderr,
    )

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


def train(spec: RewardSpec) -> int:
    """`hybridbench train-reward`: fit the reward head on the data's pairs; OUT/reward.pt."""
    import time

    from harness.backends.reward_model import build_reward_model, save_checkpoint

    records, source, key = _inputs(spec)
    out = Path(spec.out)
    d = HEAD_DEFAULTS[spec.head]
    cfg = TrainConfig(
        spec.epochs or d["epochs"],
        spec.lr or d["lr"],
        spec.l2 or 0.0,
        spec.batch_size,
        spec.seed,
        spec.head,
    )
    done = _finished(out, key, cfg, spec)
    if done is not None:
        print(
            f"{out / 'metrics.json'}: already trained with these settings (another --out, or "
            "delete it, to train again)"
        )
        _summary(out, done)
        nothing_to_do()
        return 0
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = build_reward_model(source, spec.layers, spec.dtype, head=spec.head)
    ident = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    pairs, ties = _features(model, records, key, Path(spec.data) / f"features-{ident}.pt")
    t_features = time.perf_counter() - t0
    train, test = heldout_split(pairs, spec.holdout, spec.seed)
    cv = {}
    if spec.l2 is None:
        grid = d["l2_grid"]
        cv_path, cv_key = (
            out / "l2_cv.json",
            {**key, "config": asdict(cfg), "holdout": spec.holdout, "l2_search": l2_search(grid)},
        )
        saved = json.loads(cv_path.read_text()) if cv_path.is_file() else {}
        if saved.get("key") == cv_key:  # an interrupted run: the choice made before it
            cv = {float(k): v for k, v in saved["cv"].items()}
            print(f"--l2 chosen by 5-fold cross-validation before ({cv_path})")
        else:
            print(
                f"choosing --l2 from {grid} (grown past an end while that end is best) by "
                "5-fold cross-validated preference accuracy over training prompts"
            )
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
    key = {**key, "config": asdict(cfg), "holdout": spec.holdout}
    state = _fit(train, test, cfg, out / "train_state.pt", key, spec.save_every)
    w = state_head(state)
    with torch.no_grad():
        if spec.head == "linear":
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
        **({"l2_search": l2_search(d["l2_grid"])} if spec.l2 is None else {}),
        **key,
    }
    used = sorted({r["id"] for r in records})
    save_checkpoint(out / "reward.pt", model, source, used_example_ids=used, metrics=metrics)
    _atomic_write(out / "metrics.json", json.dumps(metrics, indent=1) + "\n")  # written last
    _summary(out, metrics)
    return 0
