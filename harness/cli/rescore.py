"""`hybridbench rescore RUN...`: score stored completions again with the task's current scorer."""

from __future__ import annotations

from pathlib import Path

from harness.evaluation.rescore import rescore


def configure(p) -> None:
    p.add_argument("runs", nargs="+", type=Path, help="run folders (manifest.json, records.jsonl)")


def run(args) -> int:
    for folder in args.runs:
        r = rescore(folder)
        print(
            f"{folder}: {r['changed']} of {r['n']} records rescored differently; "
            f"{r['metric']} {r['before']:.4f} -> {r['after']:.4f}"
        )
    return 0
