"""`hybridbench calibrate`: a score router's scores along small's own answers on the calib split,
for `target_share=S calibration=FILE`. Any score router: a built-in name, an entry point or an
import path (`routers.score.ScoreRouter`; docs/routers.md).
"""

from __future__ import annotations

from harness.cli import options
from harness.evaluation.spec import RunSpec
from harness.training import calibrate


def configure(p, router: str | None = None) -> None:
    if router is None:
        p.add_argument(
            "--router",
            required=True,
            help="a score router: entropy, confidence, reward, citer, learned, r2r, or a "
            "plugin's name or import path (see `hybridbench routers`)",
        )
    p.add_argument(
        "--router-arg",
        action="append",
        default=[],
        metavar="K=V",
        help="router argument, repeatable (what its scores depend on, e.g. a checkpoint)",
    )
    p.add_argument(
        "--checkpoint",
        required=router == "reward",
        help="the router's trained scorer: reward.pt from train-reward (reward), citer.pt from "
        "train-citer (citer), learned.pt from train-learned (learned), r2r.pt from train-r2r "
        "(r2r)",
    )
    p.add_argument("--task", required=True, help="task name (see `hybridbench tasks`)")
    p.add_argument("--task-arg", action="append", default=[], metavar="K=V", help="task argument")
    p.add_argument("--split", default="calib", help="calibration split (default calib)")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=10, help="first N examples of the split")
    p.add_argument("--records", default=None, help="small-only records over the split (reused)")
    p.add_argument("--out", required=True, help="calibration JSON to write")
    options.add_decode_args(p, max_new_tokens=None)
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    """The calibration `spec_of(args)` says, its answers from `--records`, its scorer from
    `--checkpoint`."""
    return calibrate.calibrate(spec_of(args), records=args.records, checkpoint=args.checkpoint)


def spec_of(args) -> RunSpec:
    """What to calibrate, as a run: the router, its task split and decoding, the pair; its `out`
    the calibration file."""
    return RunSpec.from_args(args)
