"""`hybridbench reward-data`: synthesize the reward model's preference pairs (seed paper, section 2.1.2)."""

from __future__ import annotations

from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.training import reward_data
from harness.training.reward_data import (
    DEFAULT_TASKS,
)


def configure(p) -> None:
    p.add_argument("--out", required=True, help="data folder (created; resumed if it exists)")
    p.add_argument(
        "--tasks",
        type=options.names,
        default=",".join(DEFAULT_TASKS),
        help="comma-separated task names",
    )
    p.add_argument("--prompts", type=int, default=48, help="prompts in all (equal share per task)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=64,
        help="response length cap; 0 = each task's own budget and stop strings (full responses)",
    )
    p.add_argument("--chunks", type=int, default=16, help="chunk lengths per response pair")
    p.add_argument("--temperature", default="0.2,1.0", help="range LO,HI drawn per generation")
    p.add_argument("--top-p", default="0.8,1.0", help="range LO,HI drawn per generation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split-seed", type=int, default=0, help="task split seed (train split)")
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    spec = options.typed(
        reward_data.PairsSpec,
        args,
        temperature=reward_data.parse_range(args.temperature),
        top_p=reward_data.parse_range(args.top_p),
        models=ModelSpec.of(args),
    )
    return reward_data.make_pairs(spec)
