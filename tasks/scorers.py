"""The scorers a task without code names (`scorer=`), each the rule a built-in task uses.

    numeric  gsm8k's: the last \\boxed{...}, else "#### N", else the last number, compared
             numerically ("18.00" = "18"); metric exact_match
    exact    the stated answer (the last \\boxed{...}, else the text after the last "answer is" /
             "Answer:", else the last non-empty line) equals the reference once both are
             lower-cased, stripped of surrounding punctuation, quotes and ** and their spaces
             collapsed; metric exact_match
    choice   mmlu's / arc's letter reading (`tasks.choice.score_choice`); metric acc
    code     mbpp's: the reply's code block runs in the sandbox, the tests in a second process
             (`tasks.code.passes`); metric pass@1
    rouge    cnn_dm's ROUGE-1/2/Lsum F-measures; metric rougeLsum

`tasks.jsonl` (a JSONL file) and `tasks.hf` (any `datasets` dataset) share them, so a score
means what it means on the built-in task with the same rule.
"""

from __future__ import annotations

import functools
import re

from harness.errors import UserError
from harness.sandbox import Tests
from tasks.base import Example
from tasks.choice import LETTERS, score_choice
from tasks.code import extract_code, free_names, has_code, passes
from tasks.gsm8k import extract_answer, numeric_equal
from tasks.rules import last_boxed, unbox

METRICS = {
    "numeric": "exact_match",
    "choice": "acc",
    "code": "pass@1",
    "rouge": "rougeLsum",
    "exact": "exact_match",
}


def check_scorer(scorer, task: str) -> str:
    """`scorer` if it is one of METRICS, else one UserError naming the valid ones."""
    if scorer not in METRICS:
        raise UserError(f"task {task}: unknown scorer {scorer!r}; valid: {', '.join(METRICS)}")
    return scorer


def is_number(value) -> bool:
    if isinstance(value, bool):
        return False
    try:
        float(str(value).replace(",", ""))
    except ValueError:
        return False
    return True


def choice_letter(ref, choices: list[str], labels: list[str] | None = None) -> str | None:
    """The option letter a multiple-choice reference names, or None: an index into `choices`
    (0-based), a letter ("B", "(B)"), one of the dataset's own `labels` (ARC's "1".."4"), or
    the text of the right option."""
    letters = LETTERS[: len(choices)]
    if isinstance(ref, int) and not isinstance(ref, bool):
        return letters[ref] if 0 <= ref < len(letters) else None
    text = str(ref).strip()
    if labels and text in labels:
        return letters[labels.index(text)]
    if text.strip("() ").upper() in letters and len(text.strip("() ")) == 1:
        return text.strip("() ").upper()
    return letters[choices.index(text)] if text in choices else None


_ANSWER = re.compile(r"(?:answer is|answer:)\s*(.+)", re.IGNORECASE)
_EDGES = " \t\n.,;:!?\"'`*()[]"


def normalize(text: str) -> str:
    """' **Paris.** ' -> 'paris' (lower case, surrounding punctuation dropped, spaces collapsed)."""
    return " ".join(str(text).lower().split()).strip(_EDGES)


def exact_answer(completion: str) -> tuple[str, bool]:
    """(answer, stated): the last \\boxed{}, else what follows the last "answer is"/"Answer:"
    on its line, else the last non-empty line (stated False)."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return unbox(boxed), True
    phrases = _ANSWER.findall(completion)
    if phrases:
        return phrases[-1], True
    lines = [ln for ln in completion.splitlines() if ln.strip()]
    return (lines[-1] if lines else ""), False


def score(scorer: str, example: Example, completion: str) -> dict[str, float]:
    """The scores of one completion under `scorer` (see the module docstring). A code example
    keeps its tests in meta["tests"] (else in `reference`, as a JSONL code task does)."""
    if scorer == "numeric":
        answer, stated = extract_answer(completion)
        return {
            "exact_match": numeric_equal(answer, str(example.reference)),
            "extracted": float(stated),
        }
    if scorer == "exact":
        answer, stated = exact_answer(completion)
        hit = normalize(answer) == normalize(str(example.reference)) and normalize(answer) != ""
        return {"exact_match": float(hit), "extracted": float(stated)}
    if scorer == "choice":
        return score_choice(completion, example.meta["choices"], example.reference)
    if scorer == "code":
        tests = example.meta.get("tests", example.reference)
        gold = example.reference if "tests" in example.meta else ""
        try:
            names = free_names(tests, defined=gold)
        except SyntaxError:  # gold code that does not parse defines nothing
            names = free_names(tests)
        checked = Tests(tests, names)
        return {
            "pass@1": float(passes(extract_code(completion), checked)),
            "extracted": float(has_code(completion)),
        }
    return _summaries().score(example, completion)


@functools.cache
def _summaries():
    """cnn_dm's task, for its ROUGE scorer (it reads its data only when asked to)."""
    from tasks.cnn_dm import CnnDm

    return CnnDm()
