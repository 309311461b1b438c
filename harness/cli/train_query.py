"""`hybridbench train-query`: train the query-level router and calibrate its threshold."""

from __future__ import annotations

from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.training import query
from routers import parse_args


def configure(p) -> None:
    p.add_argument("--task", required=True)
    p.add_argument("--task-arg", action="append", default=[], metavar="K=V")
    p.add_argument("--out", required=True, help="folder for query.pt")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--train-limit", type=int, default=40)
    p.add_argument("--calib-limit", type=int, default=10)
    p.add_argument("--share", type=float, default=0.3, help="target share of prompts to large")
    p.add_argument("--small-records", default=None, help="small-only records over train")
    p.add_argument(
        "--calib-records",
        default=None,
        help="small-only records over calib: the router's held-out AUC and log loss vs the prior",
    )
    p.add_argument("--max-new-tokens", type=int, default=None, help="decode budget (no records)")
    p.add_argument("--seed", type=int, default=0)
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    spec = options.typed(
        query.QuerySpec, args, task_args=parse_args(args.task_arg), models=ModelSpec.of(args)
    )
    return query.train(spec)
