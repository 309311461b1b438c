"""HumanEval: complete a Python function from its signature and docstring, pass@1 (164).

The prompt shows the function stub in a code block. A reply may restate the whole function (what
chat models do) or give only the body (what base models and the canonical solutions do): if the
extracted code defines `entry_point` it is appended after the stub, whose imports and helpers it
may rely on, and its definition replaces the stub's; otherwise it is the stub's continuation.
That program runs in the solution's sandboxed process; the problem's `check(entry_point)` runs
unchanged in the tests' process, after the stub (so its helpers are the stub's own), with
`entry_point` taken from the solution. It passes only if that call returned
(`tasks.code.passes`: early exits, always-equal values, reading the tests and trace hooks all
fail).

Prompt: written for this project in the style of EvalPlus's chat prompt (an instruction, then the
stub in a ```python block). `extracted` as in mbpp (`tasks.code.has_code`).
Budget: `max_new_tokens` = 1024. How often each model is cut, and the command that measures
it: docs/validity.md.
"""

from __future__ import annotations

import re

from harness.sandbox import Tests
from tasks.base import Example, Task, user_message
from tasks.code import extract_code, has_code, passes
from tasks.sources import humaneval_rows

PROMPT = (
    "Complete the following Python function. "
    "Give the whole function in a ```python code block.\n\n```python\n{prompt}```"
)


class HumanEval(Task):
    name = "humaneval"
    metric = "pass@1"
    max_new_tokens = 1024  # measured, see the module docstring

    def read(self) -> list[Example]:
        rows = humaneval_rows(("task_id", "prompt", "canonical_solution", "entry_point", "test"))
        return [
            Example(
                id=row["task_id"],  # "HumanEval/0" ... "HumanEval/163"
                messages=user_message(PROMPT.format(prompt=row["prompt"])),
                reference=row["canonical_solution"],  # the gold body
                meta={k: row[k] for k in ("prompt", "entry_point", "test")},
            )
            for row in rows
        ]

    def score(self, example: Example, completion: str) -> dict[str, float]:
        stub, entry_point = example.meta["prompt"], example.meta["entry_point"]
        code = extract_code(completion)
        if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
            solution = f"{stub}\n\n{code}"
        else:
            solution = stub + code
        check = f"{example.meta['test']}\n\ncheck({entry_point})\n"
        tests = Tests(check, imports=(entry_point,), prelude=stub)
        return {"pass@1": float(passes(solution, tests)), "extracted": float(has_code(completion))}
