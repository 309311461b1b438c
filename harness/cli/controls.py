"""`hybridbench controls SWEEP_FOLDER`: the control runs a sweep folder still needs so that every
router is paired with its control at a matched share (harness/evaluation/controls.py says how
each is aimed). Prints one line "CONTROL P" per run to add, nothing when every router is matched:

    hybridbench controls results/edition2/gsm8k
    hybridbench sweep --task gsm8k --routers random --router-arg random:p=P ... --out results/edition2/gsm8k

`hybridbench experiment run` runs them itself, a few rounds, for the rows that name a control.
"""

from __future__ import annotations

from harness.cli import options
from harness.errors import UserError
from harness.evaluation import controls
from reports.load import run_dirs


def configure(p) -> None:
    p.add_argument("folder", help="a sweep's folder (one task's run folders)")
    p.add_argument(
        "--routers",
        type=options.names,
        default=None,
        help="comma-separated routers to pair (default: every router of the folder but the "
        "ends, the controls and the bounds oracle and speculative)",
    )


def run(args) -> int:
    pairs = None
    if args.routers:
        routers = list(args.routers)
        pairs = controls.pairs_of(routers)
    if not run_dirs(args.folder):
        raise UserError(f"{args.folder} holds no run folders (a published task: its folder there)")
    for control, p in controls.needed_in(args.folder, pairs):
        print(control, p)
    return 0
