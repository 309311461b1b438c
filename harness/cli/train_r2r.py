"""`hybridbench train-r2r`: train the `r2r` token router on R2R's critical-divergence labels
(`hybridbench r2r-labels`), report its held-out AUC beside entropy's and confidence's
(harness/training/r2r.py); its threshold is calibrated by `hybridbench calibrate --router r2r
--checkpoint OUT/r2r.pt`."""

from __future__ import annotations

from harness.cli import options
from harness.training import r2r


def configure(p) -> None:
    p.add_argument("--task", required=True, help="the task whose train split labelled the tokens")
    p.add_argument("--task-arg", action="append", default=[], metavar="K=V")
    p.add_argument("--out", required=True, help="folder for features, checkpoint, metrics")
    p.add_argument(
        "--labels", required=True, help="a label file (r2r-labels' OUT/labels.safetensors)"
    )
    p.add_argument(
        "--target",
        default="critical",
        choices=r2r.TARGETS,
        help="critical: the file's critical-divergence labels; oracle: every divergence "
        "(an ablation: held-out AUCs, also against the critical labels)",
    )
    p.add_argument(
        "--features",
        default=None,
        metavar="DIR",
        help="small's features along the labels' trajectories (default OUT/features; another "
        "training on the same label file can share them)",
    )
    p.add_argument("--split-seed", type=int, default=0)
    g = p.add_argument_group("network and training")
    g.add_argument("--width", type=int, default=128)
    g.add_argument("--blocks", type=int, default=2, help="residual MLP blocks")
    g.add_argument("--buckets", type=int, default=4096, help="drafted-token embedding rows")
    g.add_argument("--epochs", type=int, default=20)
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--batch-size", type=int, default=256)
    g.add_argument("--patience", type=int, default=3)
    g.add_argument(
        "--no-balance",
        action="store_true",
        help="plain BCE (default: both labels weigh the same in the loss)",
    )
    g.add_argument("--seed", type=int, default=0)
    g.add_argument(
        "--target-share",
        type=float,
        default=0.2,
        help="the checkpoint's default threshold defers this share of the held-out tokens",
    )
    g.add_argument("--bootstrap", type=int, default=1000, help="resamples for the AUC intervals")
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    fit = r2r.FitConfig(
        width=args.width,
        blocks=args.blocks,
        buckets=args.buckets,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        patience=args.patience,
        balance=not args.no_balance,
        seed=args.seed,
    )
    return r2r.train(args, fit)
