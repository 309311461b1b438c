"""hybridbench's public API: what a notebook, a script or a plugin imports.

    import hybridbench as hb

    spec = hb.RunSpec(task="gsm8k", router="entropy", router_args={"target_share": 0.2},
                      limit=20, out="runs/gsm8k-entropy")
    engine = hb.load_engine(spec)              # the pair, loaded once for several runs
    summary = hb.evaluate(spec, engine)        # -> Summary: quality, large_token_share, line()
    run = hb.RunFolder(spec.out).read()        # manifest, one record per scored example

For plugins (a router or a task of your own, found by import path or entry point):
`Router`, `Needs`, `Decision`, `ScoreRouter` (docs/routers.md) and `Task` (docs/tasks.md).

Names are imported when first used, so `import hybridbench` loads neither torch nor a model.
"""

from __future__ import annotations

import importlib

# public name -> the module that defines it
_HOMES = {
    "RunSpec": "harness.evaluation.spec",
    "Summary": "harness.evaluation.spec",
    "evaluate": "harness.evaluation.runner",
    "load_engine": "harness.evaluation.runner",
    "RunFolder": "harness.core.run_folder",
    "Run": "harness.core.run_folder",
    "Router": "harness.core.router",
    "Needs": "harness.core.router",
    "Decision": "harness.core.router",
    "StepView": "harness.core.router",
    "ScoreRouter": "routers.score",
    "Task": "tasks.base",
    "Example": "tasks.base",
    "user_message": "tasks.base",
    "JSONLTask": "tasks.jsonl",
    "UserError": "harness.errors",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'hybridbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
