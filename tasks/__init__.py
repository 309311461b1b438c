"""Benchmark tasks: a registry of names, resolved lazily (importing this package loads no data).

    from tasks import get_task
    task = get_task("mmlu", subject="professional_psychology")
    test = task.split("test", seed=0)          # list[Example]; see tasks/base.py for the splits
    task.score(test[0], "... The answer is (B).")   # {"acc": 1.0, "acc_strict": 1.0}

Each task is one small class (tasks/<module>.py); its data loads through `datasets`
(tasks/sources.py, tasks/loading.py), lm-eval's scoring rules are in tasks/rules.py. A task
without code is any `datasets` dataset (`get_task("hf", dataset="my.parquet", prompt="question",
reference="answer", scorer="numeric")`, tasks/hf.py) or a JSONL file (`get_task("jsonl",
path="my.jsonl", scorer="numeric")`, tasks/jsonl.py). A name is a built-in
(TASKS below), an entry point of an installed package (group `hybridbench.tasks`) or an import
path `package.module:Class`; `hybridbench tasks` lists them with where each comes from, and a
task from outside this repository runs behind `tasks.base.GuardedTask` (one error line when it
raises or answers in the wrong shape). docs/tasks.md shows how to add one.
"""

from __future__ import annotations

import inspect

from harness.core.registry import BUILT_IN, Entry, Registry
from harness.errors import UserError
from tasks.base import Example, GuardedTask, Task, check_disjoint

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
# Tasks made from a user's file rather than a benchmark (built-in too; not in TASKS, which lists
# the benchmarks).
FORMATS: dict[str, str] = {
    "jsonl": "tasks.jsonl:JSONLTask",
    "hf": "tasks.hf:HFTask",
}


REGISTRY = Registry("task", {**TASKS, **FORMATS}, "hybridbench.tasks")


def task_entry(name: str) -> Entry:
    """Where task `name` comes from, resolved (`Entry.provenance()` goes into run manifests)."""
    return REGISTRY.resolve(name)[1]


def get_task(name: str, **kwargs) -> Task:
    """The task registered as `name` (or at import path `name`), built with `kwargs` (e.g.
    subject=, path=)."""
    cls, entry = REGISTRY.resolve(name)
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError:
        accepted = [p for p in inspect.signature(cls).parameters] or ["none"]
        raise UserError(
            f"task {name} got unexpected arguments {sorted(kwargs)}; it accepts: {', '.join(accepted)}"
        ) from None
    if entry.origin == BUILT_IN:
        return cls(**kwargs)
    try:
        task = cls(**kwargs)
    except UserError:
        raise
    except Exception as e:  # a plugin's fault, in one line
        raise UserError(f"task {name} could not be built: {type(e).__name__}: {e}") from e
    return GuardedTask(task, name)


def task_ref(manifest: dict) -> str:
    """The name that builds a run's task again from its manifest: the recorded name when it is
    registered for the class the run used (a built-in), else another registered name of that
    class, else the class's import path (a JSONL task is named after its file, a plugin's task
    by its own `name`: neither is a registered name)."""
    cls = ((manifest.get("plugins") or {}).get("task") or {}).get("class")
    if not cls or REGISTRY.builtins.get(manifest["task"]) == cls:
        return manifest["task"]
    return next((n for n, target in REGISTRY.builtins.items() if target == cls), cls)


__all__ = [
    "FORMATS",
    "TASKS",
    "Example",
    "Task",
    "check_disjoint",
    "get_task",
    "task_entry",
    "task_ref",
]
