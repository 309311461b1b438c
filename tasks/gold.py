"""The code tasks' gold solutions through their own scorers: `check_gold(name) -> GoldCheck`.

Each gold solution (MBPP's code, HumanEval's canonical body) is passed to `task.score()` as the
completion, exactly as a model's reply would be, so this checks the data, the program assembly,
the two-process scoring and the sandbox together. Expected: humaneval 164/164, mbpp 500/500 on an
idle machine (mbpp/123 needs about the sandbox's 10 s CPU limit and can time out under load).
Run it as `hybridbench check-gold`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tasks import get_task

CODE_TASKS = ("mbpp", "humaneval")  # the tasks whose gold is code run in the sandbox


@dataclass(frozen=True)
class GoldCheck:
    """How one task's gold solutions fared against its own scorer."""

    task: str  # task name
    passed: int  # gold solutions that score 1
    total: int  # gold solutions checked
    failed: tuple[str, ...]  # ids of the examples whose gold solution does not score 1
    seconds: float  # wall clock of the whole check

    def line(self) -> str:
        """`mbpp: 500/500 gold solutions pass (95 s)`, plus the failures' ids if any."""
        text = f"{self.task}: {self.passed}/{self.total} gold solutions pass ({self.seconds:.0f} s)"
        return text + (f"\n  failed: {', '.join(self.failed)}" if self.failed else "")


def check_gold(name: str, jobs: int = 2, limit: int | None = None) -> GoldCheck:
    """Score every gold solution of task `name` (the first `limit` if given), `jobs` at a time."""
    task = get_task(name)
    examples = task.load()[:limit]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each score() waits on subprocesses
        scores = list(pool.map(lambda ex: task.score(ex, ex.reference)[task.metric], examples))
    failed = tuple(ex.id for ex, s in zip(examples, scores, strict=True) if s != 1.0)
    seconds = time.perf_counter() - start
    return GoldCheck(name, len(examples) - len(failed), len(examples), failed, seconds)
