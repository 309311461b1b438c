"""`hybridbench tasks`: the tasks a name can select, and where each comes from."""

from __future__ import annotations


def configure(p) -> None:
    pass


def run(args) -> int:
    from tasks import TASKS

    print("\n".join(sorted(TASKS)))
    return 0
