"""`hybridbench rerun SWEEP --rows A,B --out DIR`: decode rows of a sweep again and compare each
with its original (a paired quality drop, a slowdown beyond --max-slowdown, more failures).

    hybridbench rerun runs/sweep-mbpp --rows random__p=0.2,speculative__default \\
        --out runs/rerun-mbpp --lock /tmp/hybridbench-heavy.lock

Verdicts are printed and written to OUT/ROW/compare.json and OUT/compare.json. Exit status 1
when any pair is flagged.
"""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import asdict
from pathlib import Path

from harness.cli import options
from harness.cli import run as run_command
from harness.core.run_folder import RunFolder
from harness.errors import UserError
from harness.evaluation.experiment_run import held
from harness.evaluation.rerun import recorded_argv, with_out
from harness.metrics.compare import compare, report


def configure(p) -> None:
    p.add_argument("sweep", type=Path, help="a sweep's task folder (holds sweep.json)")
    p.add_argument(
        "--rows", type=options.names, required=True, help="comma-separated row folders to run again"
    )
    p.add_argument("--out", type=Path, required=True, help="where the reruns go (one folder each)")
    p.add_argument("--lock", default=None, help="hold this lock file while a row decodes")
    p.add_argument("--max-slowdown", type=float, default=1.25, help="as in `hybridbench compare`")


def run(args) -> int:
    rows = list(args.rows)
    if not rows:
        raise UserError("--rows is empty")
    commands = {row: with_out(recorded_argv(args.sweep, row), args.out / row) for row in rows}
    args.out.mkdir(parents=True, exist_ok=True)
    parser = argparse.ArgumentParser(prog="hybridbench run")
    run_command.configure(parser)
    verdicts, flagged = {}, []
    for row, argv in commands.items():
        print(f"== rerun {row}: hybridbench run {shlex.join(argv)}", flush=True)
        with held(args.lock):
            rc = run_command.run(parser.parse_args(argv))
        if rc != 0:
            print(f"!! rerun of {row} exited {rc}", flush=True)
            return rc
        old, new = RunFolder(args.sweep / row).read(), RunFolder(args.out / row).read()
        v = compare(old, new, args.max_slowdown)
        print(report(old, new, v), flush=True)
        verdicts[row] = asdict(v)
        (args.out / row / "compare.json").write_text(json.dumps(verdicts[row], indent=2) + "\n")
        if v.flags:
            flagged.append(row)
    (args.out / "compare.json").write_text(json.dumps(verdicts, indent=2) + "\n")
    which = f" ({', '.join(flagged)})" if flagged else ""
    print(f"{len(rows)} rows run again: {len(flagged)} flagged{which}")
    return 1 if flagged else 0
