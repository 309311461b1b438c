"""`hybridbench tasks`: the tasks a name can select, and where each comes from.

Built-ins (`hf` and `jsonl` among them: a task from any `datasets` dataset, tasks/hf.py, or from
a JSONL file, tasks/jsonl.py), then the entry points
of installed packages (group `hybridbench.tasks`); nothing is imported to list them. Any import
path `package.module:Class` is a task name as well (docs/tasks.md).
"""

from __future__ import annotations

from harness.cli.routers import listing


def configure(p) -> None:
    pass


def run(args) -> int:
    from tasks import REGISTRY

    print(listing(REGISTRY.entries(), "task"))
    return 0
