"""`hybridbench check-gold`: every code task's gold solutions must pass its own scorer.

    hybridbench check-gold                         # mbpp (500) and humaneval (164)
    hybridbench check-gold --task mbpp --jobs 2 --limit 50

Prints one line per task (`humaneval: 164/164 gold solutions pass (40 s)`) and the ids of the
examples whose gold fails; exits 1 if any fails. The checks themselves: `tasks.gold`.
"""

from __future__ import annotations

import argparse

from harness.errors import UserError
from tasks.gold import CODE_TASKS, check_gold


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", choices=CODE_TASKS, action="append", help="default: every code task")
    p.add_argument("--jobs", type=int, default=2, help="gold solutions scored at once (default 2)")
    p.add_argument("--limit", type=int, default=None, help="only the first N examples of each")


def run(args) -> int:
    if args.jobs < 1 or (args.limit is not None and args.limit < 1):
        raise UserError("--jobs and --limit must be at least 1")
    failed = False
    for name in args.task or CODE_TASKS:
        result = check_gold(name, args.jobs, args.limit)
        print(result.line(), flush=True)
        failed |= bool(result.failed)
    return 1 if failed else 0
