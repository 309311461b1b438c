"""Run a solution against its tests as two sandboxed processes: `run_tests` -> `Verdict`.

The tests' process starts first, makes itself non-dumpable and reads its tests from a pipe; only
then does the solution's process start. They share nothing but two pipes: the tests ask the
solution for names and calls (`harness.sandbox.calls`) and compare the plain values that come
back. The run passes only if the tests' process ran every test to its end and exited 0.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.sandbox.supervise import (
    Capture,
    Child,
    Isolation,
    Limits,
    SandboxResult,
    SandboxSetupError,
    check_usable,
    isolation_report,
    pipe_holding,
    pump,
    pump_until_exit,
    remove_tree,
    result,
    run_config,
    start,
    stop,
)

_CALLS = Path(__file__).with_name("calls.py")  # embedded in both programs: see calls.py
DEFAULT_LIMITS = Limits()  # frozen: one shared default is safe
_GRACE_S = 1.0  # once the tests ended, how long the solution may take to see it and exit


@dataclass(frozen=True)
class Tests:
    """Trusted test code, as a task ships it, and what it takes from the solution."""

    code: str  # the tests: asserts, or a check function and its call
    imports: tuple[str, ...]  # global names `code` takes from the solution (functions, classes)
    prelude: str = ""  # trusted code run first in the tests' process (HumanEval's stub)


@dataclass(frozen=True)
class Verdict:
    """How a solution fared against its tests."""

    passed: bool  # the tests' process ran every test to its end and exited 0
    tests: SandboxResult  # the tests' process (its stderr holds a failing assert's traceback)
    solution: SandboxResult  # the solution's process ("killed" if still running at the end)


def run_tests(
    solution: str, tests: Tests, limits: Limits = DEFAULT_LIMITS, hide: tuple[str, ...] = ()
) -> Verdict:
    """Run `solution` as a script, then serve the calls of `tests`, run in a second process.

    `limits` hold for each process; `timeout_s` is the wall clock for both together. With
    `Isolation.private_root` the solution sees only the interpreter, its standard library and its
    work directory; folders in `hide` (the task's data, which holds the tests) are covered by an
    empty tmpfs as well, should the new root ever reach them.

    >>> run_tests("def f(x):\\n    return 2 * x\\n", Tests("assert f(2) == 4", ("f",))).passed
    True
    """
    return _run_tests(solution, tests, limits, isolation_report(), hide)


def _run_tests(
    solution: str, tests: Tests, limits: Limits, iso: Isolation, hide: tuple[str, ...]
) -> Verdict:
    check_usable(iso)
    calls = _CALLS.read_text(encoding="utf-8")
    spec = {"prelude": tests.prelude, "imports": list(tests.imports), "code": tests.code}
    roots = [os.path.realpath(tempfile.mkdtemp(prefix="hybridbench-sandbox-")) for _ in "ts"]
    fds = _Pipes(json.dumps(spec).encode())
    children: list[Child] = []
    try:
        # 1. The tests' process: it reads its tests, then says it is ready.
        cfg = run_config(roots[0], f"{calls}\n{fds.checker_call()}", limits, iso)
        checker = start(cfg, limits, fds.checker_fds())
        children.append(checker)
        fds.passed(fds.checker_fds())
        deadline = checker.start + limits.timeout_s
        ready = Capture(1)
        pump({**checker.pipes, fds.ready_r: ready}, deadline, done=lambda: bool(ready.kept))
        # 2. Only then the solution's process: the solution, then its server.
        if ready.kept:
            program = f"{solution}\n__import__('builtins').exec({fds.server(calls)!r}, {{}})\n"
            cfg = run_config(roots[1], program, limits, iso, hide)
            children.append(start(cfg, limits, fds.solver_fds()))
            fds.passed(fds.solver_fds())
        # 3. The tests' exit is the verdict; the solution may then see EOF and exit on its own.
        exited = pump_until_exit(checker, deadline, children[-1].pipes)
        ended = time.monotonic()
        if len(children) == 2:
            pump_until_exit(children[1], min(deadline, ended + _GRACE_S))
        solver_ended = time.monotonic()
    finally:
        try:
            stop(children)
        finally:
            fds.close()
            for root in roots:
                remove_tree(root)
    checked = result(checker, timed_out=not exited, seconds=ended - checker.start)
    if len(children) == 1:  # ended or stalled before reading its tests: not the code's fault
        why = checked.stderr.strip()[-2000:]
        raise SandboxSetupError(f"the tests' process did not start ({checked.status}): {why}")
    solver = children[1]
    solved = result(solver, timed_out=not exited, seconds=solver_ended - solver.start)
    return Verdict(checked.status == "ok" and checked.reached_end, checked, solved)


class _Pipes:
    """The pipes between the two processes and the harness, and the harness's copies of them."""

    def __init__(self, spec: bytes) -> None:
        self.source_r = pipe_holding(spec)  # the tests: never in a file (first: it may fail)
        self.requests_r, self.requests_w = os.pipe()  # tests -> solution
        self.replies_r, self.replies_w = os.pipe()  # solution -> tests
        self.ready_r, self.ready_w = os.pipe()  # the tests' process has read its tests
        self.open = {*self.checker_fds(), *self.solver_fds(), self.ready_r}

    def checker_fds(self) -> tuple[int, ...]:
        return self.source_r, self.ready_w, self.requests_w, self.replies_r

    def solver_fds(self) -> tuple[int, ...]:
        return self.requests_r, self.replies_w

    def checker_call(self) -> str:
        return f"check({', '.join(map(str, self.checker_fds()))})\n"

    def server(self, calls: str) -> str:
        """calls.py's source, then the call that serves the solution's globals."""
        main = "__import__('sys').modules['__main__'].__dict__"
        return f"{calls}\nserve({main}, {self.requests_r}, {self.replies_w})\n"

    def passed(self, fds: tuple[int, ...]) -> None:
        """A child holds `fds` now: close the harness's copies (so EOF comes when it exits)."""
        for fd in fds:
            os.close(fd)
            self.open.discard(fd)

    def close(self) -> None:
        for fd in self.open:
            os.close(fd)
