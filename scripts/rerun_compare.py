"""Run a few rows of a sweep again and `hybridbench compare` each with its original (issue 14).

    python scripts/rerun_compare.py results/edition2/mbpp --rows random__p=0.2,speculative__default \\
        --out results/edition2-rerun/mbpp --lock /tmp/hybridbench-heavy.lock

Each row's command line is the one the sweep recorded (SWEEP/sweep.json), with only --out
changed: same task, split, examples, budget, models, backend, threads and batch size, so the
rerun is a fresh decode of the same examples. Each rerun resumes per example as any run does,
and a finished one is not decoded again. Then `hybridbench compare ORIGINAL RERUN` judges each
pair (a paired quality drop, a slowdown beyond --max-slowdown, more failures); its verdicts are
printed and written to OUT/compare.json. Exit status 1 when any pair is flagged.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `hybridbench` as this Python runs it, from any folder, installed or not
HYBRIDBENCH = [sys.executable, "-m", "harness.cli.main"]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def recorded_argv(sweep: Path, row: str) -> list[str]:
    """The `run` command line the sweep in folder `sweep` recorded for `row`."""
    state = sweep / "sweep.json"
    if not state.is_file():
        raise SystemExit(f"{state} not found: not a sweep folder")
    runs = json.loads(state.read_text())["runs"]
    if row not in runs:
        raise SystemExit(f"{sweep} has no row {row!r}; it has {', '.join(sorted(runs))}")
    if runs[row].get("returncode") != 0:
        raise SystemExit(
            f"{sweep}/{row} did not finish (return code {runs[row].get('returncode')})"
        )
    return list(runs[row]["argv"])


def with_out(argv: list[str], out: Path) -> list[str]:
    """argv with its --out replaced (an argv without one is an error: it would write elsewhere)."""
    if "--out" not in argv:
        raise SystemExit(f"recorded command has no --out: {shlex.join(argv)}")
    i = argv.index("--out")
    return argv[: i + 1] + [str(out)] + argv[i + 2 :]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sweep", type=Path, help="a sweep's task folder (holds sweep.json)")
    p.add_argument("--rows", required=True, help="comma-separated row folders to run again")
    p.add_argument("--out", type=Path, required=True, help="where the reruns go (one folder each)")
    p.add_argument("--lock", default=None, help="hold this lock file (flock) while a row decodes")
    p.add_argument("--max-slowdown", type=float, default=1.25, help="passed to compare")
    args = p.parse_args(argv)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    if not rows:
        raise SystemExit("--rows is empty")
    commands = {row: with_out(recorded_argv(args.sweep, row), args.out / row) for row in rows}
    args.out.mkdir(parents=True, exist_ok=True)
    verdicts, flagged = {}, []
    for row, run_argv in commands.items():
        lock = ["flock", args.lock] if args.lock else []
        print(f"== rerun {row}: {shlex.join([*lock, 'hybridbench', *run_argv])}", flush=True)
        rc = subprocess.run([*lock, *HYBRIDBENCH, *run_argv], env=ENV).returncode
        if rc != 0:
            print(f"!! rerun of {row} exited {rc}", flush=True)
            return rc
        verdict = args.out / row / "compare.json"
        cmp = ["compare", str(args.sweep / row), str(args.out / row),
               "--max-slowdown", str(args.max_slowdown), "--json", str(verdict)]  # fmt: skip
        print(f"== hybridbench {shlex.join(cmp)}", flush=True)
        rc = subprocess.run([*HYBRIDBENCH, *cmp], env=ENV).returncode
        if rc not in (0, 1):
            return rc
        verdicts[row] = json.loads(verdict.read_text())
        if rc == 1:
            flagged.append(row)
    (args.out / "compare.json").write_text(json.dumps(verdicts, indent=2) + "\n")
    print(
        f"{len(rows)} rows run again: {len(flagged)} flagged"
        + (f" ({', '.join(flagged)})" if flagged else "")
    )
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
