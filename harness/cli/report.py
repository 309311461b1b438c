"""`hybridbench report DIR [--out OUT]`: the leaderboard of a results folder, or of an edition.

    hybridbench report runs/sweep-gsm8k        # -> runs/sweep-gsm8k/report/leaderboard.{md,html}
    hybridbench report reports/published       # an edition: each TASK/report/ and index.{md,html}

A folder of run folders gets a page per task (default OUT: DIR/report). An edition, a folder of
task folders, gets every task's page in TASK/report/ and an index across the tasks (default OUT:
DIR itself). Only reads result files (reports/ never loads a model); the output is a function of
the folder: re-running on the same folder rewrites the same bytes.
"""

from __future__ import annotations


def configure(p) -> None:
    p.add_argument("results_dir", help="folder of run folders (or one run folder), or an edition")
    p.add_argument(
        "--out",
        default=None,
        help="where to write (default RESULTS_DIR/report; for an edition RESULTS_DIR itself)",
    )


def run(args) -> int:
    from reports import write_report

    html = write_report(args.results_dir, args.out)
    print(html.with_suffix(".md"))
    print(html)
    return 0
