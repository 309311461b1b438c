"""`hybridbench compare OLD NEW`: flag a quality or speed regression between two run folders."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from harness.core.run_folder import RunFolder
from harness.errors import UserError
from harness.metrics.compare import compare, report
from harness.metrics.verdicts import N_BOOT, SEED


def configure(p) -> None:
    p.add_argument("old", help="baseline run folder")
    p.add_argument("new", help="candidate run folder")
    p.add_argument(
        "--max-slowdown",
        type=float,
        default=1.25,
        help="flag when old tok/s / new tok/s exceeds this (default 1.25)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        help="flag a drop only when its CI also lies below -TOLERANCE (default 0: the test alone)",
    )
    p.add_argument(
        "--n-boot",
        type=int,
        default=N_BOOT,
        help=f"bootstrap resamples of the paired interval (default {N_BOOT:,}, seed {SEED})",
    )
    p.add_argument("--json", default=None, metavar="FILE", help="also write the verdict as JSON")


def run(args) -> int:
    if args.max_slowdown <= 0:
        raise UserError(f"--max-slowdown must be > 0, got {args.max_slowdown}")
    if args.n_boot < 1:
        raise UserError(f"--n-boot must be >= 1, got {args.n_boot}")
    old, new = RunFolder(args.old).read(), RunFolder(args.new).read()
    v = compare(old, new, args.max_slowdown, args.tolerance, args.n_boot)
    print(report(old, new, v))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(v), indent=2) + "\n", encoding="utf-8")
    return 1 if v.flags else 0
