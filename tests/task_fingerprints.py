"""Fingerprints of the built-in tasks' examples: ids, order, content and split assignment.

    PYTHONPATH=/path/to/checkout python tests/task_fingerprints.py > tests/data/task_fingerprints.json

writes, per built-in task, the number of examples, the first and last id, and sha256 digests of
(1) the ids in load order, (2) every example's content (id, chat messages, reference, meta) and
(3) the split each id falls in under seeds 0 and 1. `tests/test_task_sources.py` compares the
tasks as they load now with the committed file, which was generated from the readers that
preceded loading through `datasets` (run from the file path, the script takes `tasks` from
PYTHONPATH, so it fingerprints whichever checkout that names).
"""

from __future__ import annotations

import hashlib
import json
import sys

SEEDS = (0, 1)


def _digest(lines) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode())
        h.update(b"\n")
    return h.hexdigest()


def fingerprint(task) -> dict:
    """{n, first, last, ids, content, splits} of one task object (see the module docstring)."""
    examples = task.load()

    def content(ex) -> str:
        row = [ex.id, list(ex.messages), ex.reference, ex.meta]
        return json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)

    return {
        "n": len(examples),
        "first": examples[0].id,
        "last": examples[-1].id,
        "ids": _digest(ex.id for ex in examples),
        "content": _digest(content(ex) for ex in examples),
        "splits": _digest(f"{s}:{task.split_of(ex, s)}" for s in SEEDS for ex in examples),
    }


def main() -> None:
    from tasks import TASKS, get_task

    prints = {name: fingerprint(get_task(name)) for name in TASKS}
    json.dump(prints, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
