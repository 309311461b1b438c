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
import contextlib
import importlib
import os
import signal
import sys
import threading
from pathlib import Path

from harness.errors import ServiceError, UserError
from harness.evaluation import drain

# name -> (module of harness.cli with `configure(parser)` and `run(args)`, one-line help).
# Only the module of the command being run is imported, so `hybridbench --help` starts fast.
COMMANDS = {
    "generate": ("generate", "decode one prompt and show who wrote each token"),
    "run": ("run", "run a router on a task split, resumable, one record per example"),
    "sweep": ("sweep", "run routers at each of their settings, one run each"),
    "experiment": ("experiment", "run, plan or check an experiment spec (experiments/*.toml)"),
    "controls": ("controls", "the control runs a sweep folder needs for matched shares"),
    "publish": ("publish", "copy a sweep's results into a published edition, report rewritten"),
    "report": ("report", "write the leaderboard of a results folder"),
    "edition-changes": ("edition_changes", "the paired verdicts that differ between two editions"),
    "compare": ("compare", "flag quality or speed regressions between two runs"),
    "submit": ("submit", "a router against a published edition: same examples, paired verdicts"),
    "rerun": ("rerun", "decode rows of a sweep again and compare each with its original"),
    "rescore": ("rescore", "score stored completions again with the task's current scorer"),
    "validity": ("validity", "per run: quality, cut at the budget, no answer, tokens"),
    "training-cost": ("training_cost", "what each trained router cost: hours, tokens"),
    "demo": ("demo", "the README's main job: routers compared on a few test examples"),
    "routers": ("routers", "list the routers: built-in, from entry points"),
    "tasks": ("tasks", "list the tasks: built-in, from entry points"),
    "check-gold": ("check_gold", "the code tasks' gold solutions through their own scorers"),
    "calibrate": ("calibrate", "a token router's scores on calib, for target_share thresholds"),
    "calibrate-reward": ("calibrate_reward", "calibrate --router reward"),
    "train-citer": ("train_citer", "label tokens and train the CITER router"),
    "train-query": ("train_query", "train and calibrate the query-level router"),
    "train-learned": ("train_learned", "train the learned token router; its AUC vs entropy's"),
    "r2r-labels": ("r2r_labels", "R2R's critical-divergence token labels on train"),
    "train-r2r": ("train_r2r", "train the r2r token router; its AUC vs entropy's"),
    "reward-data": ("reward_data", "reward-model preference pairs"),
    "train-reward": ("train_reward", "train the reward model"),
    "bench-decode": ("bench_decode", "tok/s of small, large and random routing vs the cost model"),
    "bench-gpu": ("bench_gpu", "the core vs transformers' generate on a GPU, random weights"),
    "lm-eval": ("lm_eval", "lm-evaluation-harness with model `hybrid` (any router)"),
}


# Commands whose cost (wall time, tokens generated) goes to their output folder's cost.jsonl
TRAINING = (
    "reward-data",
    "train-reward",
    "train-citer",
    "train-query",
    "calibrate",
    "calibrate-reward",
    "train-learned",
    "r2r-labels",
    "train-r2r",
)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """Every command is listed; only the one named in argv imports its module (fast start-up)."""
    parser = argparse.ArgumentParser(
        prog="hybridbench",
        description="Benchmark the routers of hybrid small/large language-model inference: "
        "which tokens the large model writes, at what quality and speed.",
        epilog="Start with `hybridbench demo`; `hybridbench COMMAND --help` gives a command's "
        "options. Guides: docs/usage.md (commands), docs/routers.md (your own router).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == chosen:
            command = importlib.import_module(f"harness.cli.{module}")
            command.configure(p)
            p.set_defaults(_run=command.run)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is, so that it closes runs the same way (files, timers, costs)."""


def _terminated(signum, frame):
    raise Terminated


def _unraisable(hook):
    """A sys.unraisablehook that sends SIGTERM again when its exception was swallowed: a signal
    that lands while a C library calls back into Python (llama.cpp's log callback while a model
    loads) raises inside the callback, which ctypes reports and ignores. Sent again a moment
    later, from another thread (raised here, it would be swallowed again), it lands in the Python
    code that runs after the callback."""

    def hook_(unraisable):
        if isinstance(unraisable.exc_value, Terminated):
            again = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM))
            again.daemon = True
            again.start()
        else:
            hook(unraisable)

    return hook_


DRAINING = (  # what SIGUSR1 answers on standard error
    b"draining: no new example; stopping once those in flight are recorded "
    b"(SIGTERM stops at once)\n"
)


def _drain(signum, frame):
    if not drain.asked():  # os.write: a handler may land while the command prints
        os.write(2, DRAINING)
    drain.ask()


@contextlib.contextmanager
def terminable():
    """SIGTERM stops the command as Ctrl-C does, wherever it lands (see `_unraisable`); SIGUSR1
    drains it: no new example, the ones in flight finished (`harness.evaluation.drain`)."""
    previous, hook = signal.signal(signal.SIGTERM, _terminated), sys.unraisablehook
    usr1 = getattr(signal, "SIGUSR1", None)  # not on Windows
    before = signal.signal(usr1, _drain) if usr1 else None
    sys.unraisablehook = _unraisable(hook)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if usr1:
            signal.signal(usr1, before)
        sys.unraisablehook = hook


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    if threading.current_thread() is not threading.main_thread():
        return _main(args, argv)
    with terminable():
        return _main(args, argv)


def _main(args, argv: list[str]) -> int:
    try:
        if args.command not in TRAINING:
            return args._run(args) or 0
        from harness.training.common import cost_log

        out = Path(args.out)  # a folder, or the calibration file written into one
        with cost_log(out if out.suffix != ".json" else out.parent, argv):
            return args._run(args) or 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ServiceError as e:  # a model server gave up mid-command: what failed, in one line
        print(
            f"error: {str(e).splitlines()[0]} (the command can be run again once it answers)",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt as e:
        print("drained" if isinstance(e, drain.Drained) else "interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
