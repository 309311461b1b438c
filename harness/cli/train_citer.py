"""`hybridbench train-citer`: label tokens and train CITER's router MLP."""

from __future__ import annotations

from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.training import citer
from routers import parse_args


def configure(p) -> None:
    p.add_argument("--task", required=True)
    p.add_argument("--task-arg", action="append", default=[], metavar="K=V")
    p.add_argument("--out", required=True, help="folder for labels, checkpoints, log")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--train-limit", type=int, default=40, help="first N train examples")
    p.add_argument("--calib-limit", type=int, default=10, help="first N calib examples")
    p.add_argument("--mode", default="reference", choices=("reference", "label_free"))
    p.add_argument(
        "--trajectories",
        default=None,
        help="label_free: records.jsonl of small-only runs over train and calib, comma-separated "
        "(examples in none of them are decoded here)",
    )
    p.add_argument("--rounds", type=int, default=2, help="labelling rounds (CITER: 2)")
    p.add_argument("--max-rollouts", type=int, default=2, help="rolled-out positions/example")
    p.add_argument(
        "--rollout-tokens", type=int, default=0, help="rollout budget (0: the task's budget)"
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=0, help="label_free decode budget (0: the task's)"
    )
    p.add_argument("--target-share", type=float, default=0.2, help="calib deferral share")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--patience", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    spec = options.typed(
        citer.CiterSpec, args, task_args=parse_args(args.task_arg), models=ModelSpec.of(args)
    )
    return citer.train(spec)
