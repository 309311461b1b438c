"""`hybridbench train-reward`: train the reward model of the reward router (seed paper, section 3)."""

from __future__ import annotations

from harness.cli import options
from harness.training import reward
from harness.training.reward import (
    HEAD_DEFAULTS,
    TrainConfig,
)


def configure(p) -> None:
    p.add_argument("--data", required=True, help="folder written by `hybridbench reward-data`")
    p.add_argument("--out", required=True, help="model folder (created; resumed if it exists)")
    p.add_argument("--backbone", default=None, help="default: the data's small model")
    p.add_argument("--layers", type=int, default=6, help="backbone depth (first N layers)")
    p.add_argument(
        "--head",
        default="linear",
        choices=tuple(HEAD_DEFAULTS),
        help="linear (the paper's) or mlp (H -> 256 -> GELU -> 1 on the frozen features)",
    )
    p.add_argument("--dtype", default="bfloat16", help="backbone dtype (use the pair's)")
    p.add_argument("--holdout", type=float, default=0.2, help="share of prompts held out")
    p.add_argument("--epochs", type=int, default=None, help="default: 200 linear, 40 mlp")
    p.add_argument("--lr", type=float, default=None, help="default: 1e-2 linear, 1e-3 mlp")
    p.add_argument(
        "--l2",
        type=float,
        default=None,
        help="L2 penalty on the head; default: the best 5-fold CV preference accuracy over "
        "training prompts among "
        + "; ".join(f"{k} {v['l2_grid']}" for k, v in HEAD_DEFAULTS.items())
        + " (grown past an end while that end is best)",
    )
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=int, default=50, help="epochs between checkpoints")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")


def run(args) -> int:
    return reward.train(options.typed(reward.RewardSpec, args))
