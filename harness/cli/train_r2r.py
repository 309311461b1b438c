"""`hybridbench train-r2r`: train the `r2r` token router on R2R's critical-divergence labels
(`hybridbench r2r-labels`), report its held-out AUC beside entropy's and confidence's
(harness/training/r2r.py); its threshold is calibrated by `hybridbench calibrate --router r2r
--checkpoint OUT/r2r.pt`."""

from __future__ import annotations

from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.training import r2r, token_net
from routers import parse_args


def configure(p) -> None:
    labels = {"required": True, "help": "a label file (r2r-labels' OUT/labels.safetensors)"}
    target = {
        "default": "critical",
        "choices": r2r.TARGETS,
        "help": "critical: the file's critical-divergence labels; oracle: every divergence "
        "(an ablation: held-out AUCs, also against the critical labels)",
    }
    g = options.add_token_net_args(p, labels, target)
    g.add_argument("--blocks", type=int, default=2, help="residual MLP blocks")
    g.add_argument(
        "--no-balance",
        action="store_true",
        help="plain BCE (default: both labels weigh the same in the loss)",
    )
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    fit = r2r.FitConfig(blocks=args.blocks, balance=not args.no_balance, **options.fit_args(args))
    spec = options.typed(
        token_net.TokenNetSpec, args, task_args=parse_args(args.task_arg), models=ModelSpec.of(args)
    )
    return r2r.train(spec, fit)
