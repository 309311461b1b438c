"""The `hybridbench` command line.

    hybridbench generate --router oracle --prompt "What is 17*23?"
    hybridbench run --task gsm8k --router random --router-arg p=0.3 --limit 5 --out runs/x
    hybridbench bench-decode --tokens 64

Each subcommand lives in a module exposing `configure(parser)` and `run(args)`; the table below
maps names to modules and is resolved when the command line is parsed. User mistakes print one
`error:` line and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from pathlib import Path

from harness.errors import UserError

COMMANDS = {
    "generate": ("harness.commands", "generate", "decode one prompt and show who wrote each token"),
    "run": (
        "harness.runner",
        "run",
        "run a router on a task split, resumable, one record per example",
    ),
    "bench-decode": (
        "harness.bench",
        "bench_decode",
        "tok/s of small, large and random routing vs the cost model",
    ),
    "demo": (
        "harness.commands",
        "demo",
        "the README's main job: a few routers on a few test examples",
    ),
    "reward-data": ("harness.training.reward_data", "reward_data", "reward-model preference pairs"),
    "train-reward": ("harness.training.reward", "train_reward", "train the reward model"),
    "calibrate": (
        "harness.calibrate",
        "calibrate",
        "a token router's scores on calib, for target_share thresholds",
    ),
    "calibrate-reward": ("harness.calibrate", "calibrate_reward", "calibrate --router reward"),
    "lm-eval": (
        "harness.lmeval",
        "lm_eval",
        "lm-evaluation-harness with model `hybrid` (any router)",
    ),
    "compare": ("harness.compare", "compare", "flag quality or speed regressions between two runs"),
    "sweep": ("harness.sweep", "sweep", "run routers at each of their settings, one run each"),
    "report": ("harness.report_cmd", "report", "write the leaderboard of a results folder"),
    "train-citer": (
        "harness.training.citer",
        "train_citer",
        "label tokens and train the CITER router",
    ),
    "train-query": (
        "harness.training.query",
        "train_query",
        "train and calibrate the query-level router",
    ),
}


# Commands whose cost (wall time, tokens generated) goes to their output folder's cost.jsonl
TRAINING = ("reward-data", "train-reward", "train-citer", "train-query", "calibrate",
            "calibrate-reward")  # fmt: skip


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """Every command is listed; only the one named in argv imports its module (fast start-up)."""
    parser = argparse.ArgumentParser(prog="hybridbench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("routers", help="list the registered routers")
    sub.add_parser("tasks", help="list the registered tasks")
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (module, prefix, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == chosen:
            getattr(importlib.import_module(module), f"configure_{prefix}")(p)
            p.set_defaults(_run=(module, prefix))
    return parser


def _terminated(signum, frame):
    raise KeyboardInterrupt  # so that SIGTERM closes runs as Ctrl-C does (files, timers, costs)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    if threading.current_thread() is not threading.main_thread():
        return _main(args, argv)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(args, argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(args, argv: list[str]) -> int:
    try:
        if args.command == "routers":
            from routers import ROUTERS

            print("\n".join(sorted(ROUTERS)))
            return 0
        if args.command == "tasks":
            from tasks import TASKS

            print("\n".join(sorted(TASKS)))
            return 0
        module, prefix = args._run
        run = getattr(importlib.import_module(module), f"run_{prefix}")
        if args.command not in TRAINING:
            return run(args) or 0
        from harness.training.common import cost_log

        out = Path(args.out)  # a folder, or the calibration file written into one
        with cost_log(out if out.suffix != ".json" else out.parent, argv):
            return run(args) or 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
