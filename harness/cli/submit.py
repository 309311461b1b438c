"""`hybridbench submit`: a router evaluated against a published edition on the same examples, and
placed on its leaderboard with paired verdicts (harness/evaluation/submit.py says each step).

    hybridbench submit --router margin --edition reports/published/gsm8k --out runs/submit-gsm8k

The models, decoding and backend must be the edition's (the defaults are: the default pair on
llama.cpp, the edition's decoding); the command refuses with the reason when they are not.
"""

from __future__ import annotations

from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.evaluation import submit
from harness.evaluation.submit import SubmitSpec
from harness.training.calibrate import calibrate
from routers import parse_args


def configure(p) -> None:
    options.add_router_args(p)
    p.add_argument(
        "--edition",
        required=True,
        help="a published task folder, e.g. reports/published/gsm8k (its run folders)",
    )
    p.add_argument("--out", required=True, help="submission folder (created; resumed if it exists)")
    p.add_argument("--task", default=None, help="must be the edition's task (default: it)")
    p.add_argument("--split", default=None, help="must be the edition's split (default: it)")
    p.add_argument(
        "--calib-limit",
        type=int,
        default=None,
        help="calibrate a score router on the first N calib examples (default: all of them)",
    )
    p.add_argument(
        "--calib-records", default=None, help="small-only records over calib (reused answers)"
    )
    p.add_argument(
        "--anchor-limit",
        type=int,
        default=48,
        help="large-only speed anchor on this machine, first N examples (default 48; 0: none)",
    )
    g = p.add_argument_group("decoding (default: the edition's; another value is refused)")
    g.add_argument("--max-new-tokens", type=int, default=None)
    g.add_argument("--temperature", type=float, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--verdicts-only",
        action="store_true",
        help="write OUT's board, report and verdicts again from its run folders, decoding "
        "nothing (a submission already run, e.g. under a newer verdict rule)",
    )
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    if args.verdicts_only:
        return submit.rewrite(args.edition, args.out)
    return submit.submit(spec_of(args), calibrate)


def spec_of(args) -> SubmitSpec:
    """The submission of `hybridbench submit`'s parsed options."""
    return options.typed(
        SubmitSpec, args, router_args=parse_args(args.router_arg), models=ModelSpec.of(args)
    )
