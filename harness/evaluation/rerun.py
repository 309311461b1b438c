"""Rows of a sweep decoded again from their recorded command lines, to be compared with the
originals (`hybridbench rerun`): the regression check of a routing setup.

Each row's command line is the one the sweep recorded (SWEEP/sweep.json), with only --out
changed: same task, split, examples, budget, models, backend, threads and batch size, so the
rerun is a fresh decode of the same examples. Each rerun resumes per example as any run does,
and a finished one is not decoded again.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.core.run_folder import RunFolder
from harness.errors import UserError


def recorded_argv(sweep: Path, row: str) -> list[str]:
    """The `run` command line the sweep in folder `sweep` recorded for `row` (without "run")."""
    state = sweep / "sweep.json"
    if not state.is_file():
        raise UserError(f"{state} not found: {sweep} is not a sweep folder")
    runs = json.loads(state.read_text())["runs"]
    if row not in runs:
        raise UserError(f"{sweep} has no row {row!r}; it has {', '.join(sorted(runs))}")
    if runs[row].get("returncode") != 0:
        raise UserError(f"{sweep}/{row} did not finish (return code {runs[row].get('returncode')})")
    if not RunFolder(sweep / row).finished():
        raise UserError(f"{sweep}/{row} holds no finished run to compare with (no summary)")
    argv = list(runs[row]["argv"])
    return argv[1:] if argv and argv[0] == "run" else argv


def with_out(argv: list[str], out: Path) -> list[str]:
    """argv with its --out replaced (an argv without one is an error: it would write elsewhere)."""
    if "--out" not in argv:
        raise UserError(f"the recorded command has no --out: {' '.join(argv)}")
    i = argv.index("--out")
    return argv[: i + 1] + [str(out)] + argv[i + 2 :]
