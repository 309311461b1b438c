"""Which share of small's own tokens a CITER checkpoint's thresholds defer.

A CITER checkpoint keeps its MLP's scores along the calib trajectories it was calibrated on
(reference answers in reference mode) and re-calibrates tau from them for each `share=`. At run
time the router reads small's hidden states along small's own answers. This script scores
small's hidden states along the answers of a small-only run (its records.jsonl, e.g. small's
greedy answers on calib) and prints, for each share, tau and the share of those tokens it
defers: when it matches the share a hybrid row realized on test rather than the asked share,
the gap is the trajectory shift (reference vs own answers), not a calib/test shift.

    python -m benchmarks.citer_shift results/train13/citer-ref-gsm8k/citer.pt \\
        results/train13/gsm8k-calib-small/records.jsonl --threads 2

Loads small only (the checkpoint's model and backend family); teacher forcing, no decoding.
Given a calibration file instead of records (`hybridbench calibrate --router citer` with the
same checkpoint along those answers), it reads the scores stored there and loads no model
(seconds, not the 7-16 minutes of scoring small's hidden states again):

    python -m benchmarks.citer_shift results/train13/citer-ref-gsm8k/citer.pt \\
        results/edition2/calibration/gsm8k/citer.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def shares_of(ckpt_path, scores, shares):
    """[(share, tau, deferred share, tokens)]: tau from the checkpoint's own calib scores for each
    asked share, and the share of `scores` (P(small suffices) per token) below it."""
    import torch

    from routers.citer import Citer

    scores = torch.as_tensor(scores, dtype=torch.float32)  # compared with tau as the router does
    out = []
    for share in shares:
        tau = Citer(str(ckpt_path), share=share).threshold
        out.append((share, tau, float((scores < tau).double().mean()), len(scores)))
    return out


def calibration_shares(ckpt_path, calibration, shares):
    """shares_of() on the scores of a `hybridbench calibrate --router citer` file made with this
    checkpoint (its sha256 prefix is checked, as the router checks it at run time)."""
    from harness.errors import UserError
    from routers.calibration import read_calibration
    from routers.citer import file_digest

    cal = read_calibration(calibration, "citer")
    if str(cal.get("checkpoint_sha256", ""))[:16] != file_digest(ckpt_path):
        raise UserError(f"{calibration} was made with another checkpoint than {ckpt_path}")
    if not cal["scores"]:
        raise UserError(f"{calibration} holds no scores")
    return shares_of(ckpt_path, cal["scores"], shares)


def deferred_shares(ckpt_path, records, shares, threads=1, dtype="bfloat16", chunk=256):
    """[(share, tau, deferred share, tokens)] over the answers in `records` (a small-only run)."""
    import torch
    from tqdm import tqdm

    from harness.backends.engine import Engine, load_backend
    from harness.errors import UserError
    from harness.training.labels import small_hidden
    from routers.citer import Citer, load_checkpoint
    from tasks import get_task

    ck = load_checkpoint(ckpt_path, "citer")
    rows = [json.loads(x) for x in Path(records).read_text(encoding="utf-8").splitlines() if x]
    if not rows:
        raise UserError(f"{records} holds no records")
    small, tok = load_backend(
        ck["models"]["small"], "small", ck.get("small_backend", "hf"), "auto", dtype, threads
    )
    engine, task = Engine(tok, {"small": small}), get_task(ck["task"])
    examples = {}
    for split in sorted({r["split"] for r in rows}):
        examples |= {e.id: e for e in task.split(split, seed=ck["split_seed"])}
    hs = []
    for r in tqdm(rows, desc="small's hidden states", unit="example", file=sys.stderr):
        ids = r["generation"]["token_ids"]
        if r["example_id"] not in examples:
            raise UserError(
                f"{r['example_id']} is not in {ck['task']} (split seed {ck['split_seed']})"
            )
        if ids:
            hs.append(small_hidden(engine, examples[r["example_id"]], ids, chunk).float())
    return shares_of(ckpt_path, Citer(str(ckpt_path)).scores(torch.cat(hs)), shares)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="a citer.pt from `hybridbench train-citer`")
    ap.add_argument(
        "answers",
        help="records.jsonl of a small-only run (small's own answers), or a calibration file "
        "(.json) that `hybridbench calibrate --router citer` made along them",
    )
    ap.add_argument("--shares", default="0.1,0.2,0.35", help="asked shares, comma-separated")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="bfloat16", help="transformers only, as the run used")
    args = ap.parse_args()
    from harness.errors import UserError

    try:
        shares = [float(s) for s in args.shares.split(",")]
        if not all(0 < s < 1 for s in shares):
            raise ValueError
    except ValueError:
        print(f"--shares: numbers in (0, 1), got {args.shares!r}", file=sys.stderr)
        return 2
    try:
        if args.answers.endswith(".json"):
            res = calibration_shares(args.checkpoint, args.answers, shares)
        else:
            res = deferred_shares(args.checkpoint, args.answers, shares, args.threads, args.dtype)
    except (UserError, FileNotFoundError) as e:
        print(f"citer_shift: {e}", file=sys.stderr)
        return 2
    print(f"{args.checkpoint} on the answers in {args.answers}:")
    for share, tau, deferred, n in res:
        print(f"  asked {share:g}: tau {tau:.4f}, deferred {deferred:.4f} of {n} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
