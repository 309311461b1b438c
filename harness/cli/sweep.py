"""`hybridbench sweep`: routers at each of their settings on one task, one run per (router, setting)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
import traceback
from pathlib import Path

from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.cli import run as run_command
from harness.errors import UserError
from harness.evaluation import sweep
from harness.evaluation.sweep import DEFAULT_TARGETS, Outcome, SweepSpec


def configure(p) -> None:
    p.add_argument("--task", required=True, help="task name (see `hybridbench tasks`)")
    p.add_argument("--task-arg", action="append", default=[], metavar="K=V", help="task argument")
    p.add_argument("--routers", required=True, help="comma-separated router names")
    p.add_argument(
        "--targets",
        default=DEFAULT_TARGETS,
        help=f"comma-separated large-share targets in [0, 1] (default {DEFAULT_TARGETS})",
    )
    p.add_argument(
        "--router-arg",
        action="append",
        default=[],
        metavar="ROUTER:K=V",
        help="fixed argument for every setting of ROUTER, repeatable",
    )
    p.add_argument("--out", required=True, help="results folder (created; resumed if it exists)")
    p.add_argument("--split", default="test", help="train | calib | test | all (default test)")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="first N examples of the split")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--jobs", type=int, default=1, help="local: runs at once (default 1)")
    p.add_argument("--ray-address", default=None, help="ray: address of an existing cluster")
    p.add_argument("--ray-cpus", type=float, default=1, help="ray: CPUs each run reserves")
    p.add_argument(
        "--reuse-answers",
        default=None,
        metavar="SMALL_RUN,LARGE_RUN",
        help="passed to the runs of query routers and the oracle only (`hybridbench run --help`)",
    )
    _add_run_options(p)


def _add_run_options(p) -> None:
    """The `run` options a sweep passes on to every run unchanged."""
    options.add_decode_args(p, max_new_tokens=None)
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    return sweep.sweep(spec_of(args), run_job)


def spec_of(args) -> SweepSpec:
    """The sweep of `hybridbench sweep`'s parsed options."""
    routers = sweep.parse_routers(args.routers)
    return options.typed(
        SweepSpec,
        args,
        routers=routers,
        task_args=tuple(args.task_arg),
        targets=tuple(sweep.parse_targets(args.targets)),
        router_args=sweep.fixed_router_args(args.router_arg, list(routers)),
        models=ModelSpec.of(args),
    )


def run_job(name: str, argv: tuple[str, ...], log: str | None = None) -> Outcome:
    """Run one `hybridbench run` command line in this process; output to `log` when given.

    The same function serves every executor: called directly, in a pool process, or as a Ray task.
    """
    parser = argparse.ArgumentParser(prog="hybridbench run")
    run_command.configure(parser)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if log:
            Path(log).parent.mkdir(parents=True, exist_ok=True)
            f = stack.enter_context(open(log, "a", encoding="utf-8"))  # noqa: SIM115
            stack.enter_context(contextlib.redirect_stdout(f))
            stack.enter_context(contextlib.redirect_stderr(f))
        try:
            rc, error = run_command.run(parser.parse_args(list(argv[1:]))), ""
            if rc:
                error = "some examples failed (see its records)"
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            rc, error = 2, str(e)
        except SystemExit as e:  # argparse refused the command line
            rc, error = 2, f"bad run command line (exit {e.code})"
        except Exception as e:  # noqa: BLE001 - one failed run must not stop the sweep
            traceback.print_exc()
            rc, error = 1, f"{type(e).__name__}: {e}"
    gc.collect()  # free the models before the next run in this process
    return Outcome(name, rc, time.perf_counter() - t0, error.splitlines()[0] if error else "")
