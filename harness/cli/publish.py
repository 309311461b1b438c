"""`hybridbench publish RESULTS REPORTS --tasks ...`: copy a sweep's task folders into a published
folder as a leaderboard edition (records gzip-compressed, the same bytes every time) and write
each task's report there (reports/publish.py):

    hybridbench publish results/edition2 reports/published --tasks gsm8k,mbpp,humaneval \\
        --readme README.md   # the site's matrix into the README's headline block too
"""

from __future__ import annotations

import sys

from harness.cli import options
from reports.publish import publish, write_headline


def configure(p) -> None:
    p.add_argument("results", help="folder of task folders (e.g. results/edition2)")
    p.add_argument("reports", help="published folder (e.g. reports/published)")
    p.add_argument(
        "--tasks", type=options.names, required=True, help="comma-separated task folders to publish"
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="drop the published run folders RESULTS lacks (without it publishing refuses, "
        "naming them)",
    )
    p.add_argument(
        "--readme",
        default=None,
        metavar="FILE",
        help="also write the site's matrix into FILE's headline block (the lines from "
        "'<!-- headline' to '<!-- /headline -->')",
    )


def run(args) -> int:
    tasks = list(args.tasks)
    done = publish(args.results, args.reports, tasks, replace=args.replace)
    for task, html in zip(tasks, done.reports, strict=True):
        print(f"{args.reports}/{task}: {html}")
    for name in done.missing:
        print(f"warning: {name} (named by a run) not found; not copied", file=sys.stderr)
    if done.router_files:
        print(f"{args.reports}/routers: {len(done.router_files)} router files")
    if args.readme:
        changed = write_headline(args.readme, args.reports)
        print(f"{args.readme}: headline {'rewritten' if changed else 'already the matrix'}")
    return 0
