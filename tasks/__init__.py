"""Benchmark tasks: a registry of names, resolved lazily (importing this package loads no data).

    from tasks import get_task
    task = get_task("mmlu", subject="professional_psychology")
    test = task.split("test", seed=0)          # list[Example]; see tasks/base.py for the splits
    task.score(test[0], "... The answer is (B).")   # {"acc": 1.0, "acc_strict": 1.0}

Each task is one small class (tasks/<module>.py); data readers are in tasks/sources.py,
lm-eval's scoring rules in tasks/rules.py.
"""

from __future__ import annotations

import importlib
import inspect

from harness.errors import UserError
from tasks.base import Example, Task, check_disjoint

TASKS: dict[str, str] = {
    "gsm8k": "tasks.gsm8k:GSM8K",
    "mbpp": "tasks.mbpp:MBPP",
    "humaneval": "tasks.humaneval:HumanEval",
    "mmlu": "tasks.mmlu:MMLU",
    "arc_challenge": "tasks.arc:ARCChallenge",
    "commonsense_qa": "tasks.csqa:CommonsenseQA",
    "math500": "tasks.math500:MATH500",
    "cnn_dm": "tasks.cnn_dm:CnnDm",
}


def get_task(name: str, **kwargs) -> Task:
    """The task registered as `name`, built with `kwargs` (e.g. subject=, path=)."""
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    module, cls_name = TASKS[name].split(":")
    cls = getattr(importlib.import_module(module), cls_name)
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError:
        accepted = [p for p in inspect.signature(cls).parameters] or ["none"]
        raise UserError(
            f"task {name} got unexpected arguments {sorted(kwargs)}; it accepts: {', '.join(accepted)}"
        ) from None
    return cls(**kwargs)


__all__ = ["TASKS", "Example", "Task", "check_disjoint", "get_task"]
