"""`hybridbench experiment run|status|plan SPEC`: an experiment spec (experiments/*.toml) run as
one resumable command (docs/experiments.md).

    hybridbench experiment plan experiments/edition2.toml       # the command lines; nothing runs
    nohup hybridbench experiment run experiments/edition2.toml \\
        --lock /tmp/hybridbench-heavy.lock >> experiment.log 2>&1 &
    hybridbench experiment status experiments/edition2.toml     # done, examples, hours left
    hybridbench experiment verdicts experiments/learned-router.toml  # paired verdict tables
    kill -TERM PID                                               # stops cleanly; run resumes
    kill -USR1 PID       # drains: the examples in flight finish (or --drain-after HOURS)

Every step is a `hybridbench` command line, run in this process by the command's own parser
and `run` (`execute`); a step its folders say is done is skipped.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import shlex
import signal
import sys
import threading
import traceback
from pathlib import Path

from harness.cli import options
from harness.cli.main import COMMANDS, TRAINING
from harness.errors import UserError
from harness.evaluation import drain, experiment, experiment_run


def configure(p) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    for action, help_ in (
        ("run", "run the steps not done yet (resumable; Ctrl-C or SIGTERM stops cleanly)"),
        ("status", "per step: done, examples done of target, hours left at measured rates"),
        ("plan", "print the command lines it would run now; nothing runs"),
        ("verdicts", "the verdict steps' paired differences, as markdown tables"),
    ):
        q = sub.add_parser(action, help=help_, description=help_)
        q.add_argument("spec", help="experiment spec, e.g. experiments/edition2.toml")
        q.add_argument(
            "--out",
            default=None,
            help="another output folder than the spec's (its publish target is then dropped)",
        )
        q.add_argument("--n", type=int, default=None, help="every task's example count")
        q.add_argument(
            "--tasks", type=options.names, default=None, help="comma-separated: only these tasks"
        )
        q.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="change one value of the spec, e.g. models.small=PATH, vars.trained=DIR, "
            "anchors.n=5 (VALUE read as TOML, else as text), repeatable",
        )
        if action == "verdicts":
            q.add_argument("--md", default=None, metavar="FILE", help="also write them here")
        if action == "run":
            q.add_argument(
                "--lock",
                default=None,
                metavar="FILE",
                help="hold this lock file while a step loads models, so that one heavy job "
                "runs at a time (e.g. /tmp/hybridbench-heavy.lock)",
            )
            q.add_argument(
                "--hours",
                type=float,
                default=None,
                help="stop cleanly (as SIGTERM) after this many hours; the same command resumes",
            )
            q.add_argument(
                "--drain-after",
                type=float,
                default=None,
                metavar="HOURS",
                help="after this many hours, drain (as SIGUSR1): no new example, the ones in "
                "flight finished and recorded, then stop; the same command resumes",
            )


def run(args) -> int:
    tasks = list(args.tasks or ())
    spec = experiment.load(args.spec, args.set, args.out, args.n, tasks)
    if args.action == "status":
        print("\n".join(experiment_run.report(spec)))
        return 0
    if args.action == "verdicts":
        text = "\n".join(experiment_run.verdicts(spec))
        print(text)
        if args.md:
            Path(args.md).write_text(text, encoding="utf-8")
        return 0
    if args.action == "plan":
        lines = experiment_run.plan(spec)
        print("\n".join(lines))
        check_parses([line for line in lines if not line.startswith("#")])
        return 0
    todo = experiment.steps(spec)
    check_parses(
        [experiment_run.command_line(s.argv) for s in todo if isinstance(s, experiment.Command)]
        + [
            experiment_run.command_line(s.command(c, 0.5))
            for s in todo
            if isinstance(s, experiment.Controls)
            for c in s.argv
        ]
    )
    with stop_after(args.hours), drain_after(args.drain_after):
        return experiment_run.run(spec, execute, args.lock, say)


def say(line: str) -> None:
    print(line, flush=True)


def _parser(name: str) -> tuple[argparse.ArgumentParser, object]:
    if name not in COMMANDS:
        raise UserError(f"unknown command {name!r}; valid: {', '.join(COMMANDS)}")
    module = importlib.import_module(f"harness.cli.{COMMANDS[name][0]}")
    parser = argparse.ArgumentParser(prog=f"hybridbench {name}")
    module.configure(parser)
    return parser, module


def check_parses(lines: list[str]) -> None:
    """Every command line parses with its command's own parser, or one clear error line."""
    for line in lines:
        argv = shlex.split(line)[1:]
        parser, _ = _parser(argv[0])
        try:
            parser.parse_args(argv[1:])
        except SystemExit:
            raise UserError(f"the spec gives a command line that does not parse: {line}") from None


def execute(argv: tuple[str, ...]) -> int:
    """Run one `hybridbench` command line in this process, as the command line would: its own
    parser and `run`, a training command's cost logged to its folder's cost.jsonl, a user error
    as one `error:` line (status 2), a crash as a traceback (status 1), Ctrl-C as status 130."""
    name = argv[0]
    parser, module = _parser(name)
    try:
        args = parser.parse_args(list(argv[1:]))
        args.command = name
        if name in TRAINING:
            from harness.training.common import cost_log  # torch: only a training step needs it

            out = Path(args.out)  # a folder, or the calibration file written into one
            with cost_log(out if out.suffix != ".json" else out.parent, list(argv)):
                return module.run(args) or 0
        return module.run(args) or 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # argparse refused the command line
        return int(e.code or 0) if isinstance(e.code, int) else 2
    except KeyboardInterrupt:
        return experiment_run.INTERRUPTED
    except Exception:  # noqa: BLE001 - one failed step must not stop the experiment
        traceback.print_exc()
        return 1
    finally:
        gc.collect()  # free the models before the next step


class stop_after:
    """Raise KeyboardInterrupt in the main thread after `hours` (None: never), as SIGTERM does."""

    def __init__(self, hours: float | None):
        self.seconds = None if hours is None else max(1, round(hours * 3600))

    def __enter__(self):
        if self.seconds and threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGALRM, self._stop)
            signal.alarm(self.seconds)
        return self

    def __exit__(self, *exc):
        if self.seconds and threading.current_thread() is threading.main_thread():
            signal.alarm(0)
            signal.signal(signal.SIGALRM, self.previous)

    @staticmethod
    def _stop(signum, frame):
        print("the time given (--hours) is up: stopping", file=sys.stderr, flush=True)
        raise KeyboardInterrupt


class drain_after:
    """Ask a drain (`harness.evaluation.drain`) after `hours` (None: never), as SIGUSR1 does:
    nothing decoded is lost, the run stops about one answer's time later."""

    def __init__(self, hours: float | None):
        if hours is not None and hours <= 0:
            raise UserError(f"--drain-after must be > 0 hours, not {hours:g}")
        self.timer = None if hours is None else threading.Timer(hours * 3600, self._drain)

    def __enter__(self):
        if self.timer:
            self.timer.daemon = True
            self.timer.start()
        return self

    def __exit__(self, *exc):
        if self.timer:
            self.timer.cancel()

    @staticmethod
    def _drain():
        print("the time given (--drain-after) is up: draining", file=sys.stderr, flush=True)
        drain.ask()
