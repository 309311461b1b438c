"""`hybridbench edition-changes OLD NEW --tasks ...`: the paired verdicts of each task page that
read differently in two editions of a leaderboard, with both editions' numbers
(reports/editions.py):

    git worktree add --detach /tmp/edition2 COMMIT   # the older edition, as published then
    hybridbench edition-changes /tmp/edition2/reports/published reports/published \\
        --tasks gsm8k,mbpp,humaneval --md changes.md
"""

from __future__ import annotations

from pathlib import Path

from harness.cli import options
from reports.editions import changed_verdicts
from reports.render import md_table


def configure(p) -> None:
    p.add_argument("old", help="the older edition: a folder of task folders")
    p.add_argument("new", help="the newer edition: a folder of task folders")
    p.add_argument(
        "--tasks", type=options.names, required=True, help="comma-separated task folders to compare"
    )
    p.add_argument("--md", default=None, metavar="FILE", help="also write the table here")


def run(args) -> int:
    tasks = list(args.tasks)
    table, _ = changed_verdicts(args.old, args.new, tasks)
    text = (f"{md_table(table)}\n\n" if table.rows else "") + f"{table.note}\n"
    print(text, end="")
    if args.md:
        Path(args.md).write_text(text)
    return 0
