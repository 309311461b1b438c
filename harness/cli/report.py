"""`hybridbench report DIR [--out OUT]`: the leaderboard of a results folder (a sweep's, or runs').

    hybridbench report runs/sweep-gsm8k            # -> runs/sweep-gsm8k/report/leaderboard.{md,html}

Only reads result files (reports/ never loads a model). The output is a function of the folder:
re-running on the same folder rewrites the same bytes.
"""

from __future__ import annotations

from pathlib import Path


def configure(p) -> None:
    p.add_argument("results_dir", help="folder of run folders (or one run folder)")
    p.add_argument("--out", default=None, help="where to write (default RESULTS_DIR/report)")


def run(args) -> int:
    from reports import write_report

    html = write_report(args.results_dir, args.out or Path(args.results_dir) / "report")
    print(html.with_name("leaderboard.md"))
    print(html)
    return 0
