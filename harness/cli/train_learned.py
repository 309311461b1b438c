"""`hybridbench train-learned`: train the `learned` token router on token labels, report its
held-out AUC beside entropy's and confidence's (harness/training/learned.py); its threshold is
calibrated by `hybridbench calibrate --router learned --checkpoint OUT/learned.pt`."""

from __future__ import annotations

from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.errors import UserError
from harness.training import learned
from routers import parse_args
from routers.learned import INPUTS


def configure(p) -> None:
    labels = {
        "default": None,
        "help": "a token label file (train-citer's labels_r1.safetensors); default: made here",
    }
    target = {
        "default": "oracle",
        "choices": learned.TARGETS,
        "help": "oracle: small's greedy token equals large's; citer: the file's own labels",
    }
    g = options.add_token_net_args(p, labels, target)
    g.add_argument(
        "--inputs",
        type=options.names,
        default="dist,hidden,token",
        help="what the network reads, comma-separated: dist (small's distribution), hidden "
        "(its last hidden state), token (the drafted token)",
    )
    g = p.add_argument_group("labels made here (without --labels)")
    g.add_argument("--train-limit", type=int, default=40, help="first N train examples")
    g.add_argument("--mode", default="label_free", choices=("reference", "label_free"))
    g.add_argument(
        "--trajectories", default=None, help="label_free: records.jsonl of a small-only train run"
    )
    g.add_argument("--max-rollouts", type=int, default=2, help="rolled-out positions/example")
    g.add_argument("--rollout-tokens", type=int, default=0, help="rollout budget (0: the task's)")
    g.add_argument(
        "--max-new-tokens",
        type=int,
        default=0,
        help="budget of answers decoded here (0: the task's)",
    )
    g = p.add_argument_group("overhead")
    g.add_argument(
        "--overhead", type=int, default=0, metavar="N", help="time the router on N calib prompts"
    )
    g.add_argument("--overhead-tokens", type=int, default=64, help="tokens per timed prompt")
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    inputs = set(args.inputs)
    if not inputs or inputs - set(INPUTS):
        raise UserError(f"--inputs takes a comma-separated subset of {','.join(INPUTS)}")
    fit = learned.FitConfig(
        inputs=tuple(i for i in INPUTS if i in inputs), **options.fit_args(args)
    )
    spec = options.typed(
        learned.LearnedSpec, args, task_args=parse_args(args.task_arg), models=ModelSpec.of(args)
    )
    return learned.train(spec, fit)
