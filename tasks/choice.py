"""Letter-answer multiple choice (mmlu, arc_challenge, commonsense_qa): one prompt, one scorer.

The reference is lm-eval's zero-shot chain-of-thought MMLU (`mmlu_flan_cot_zeroshot`), the
lm-eval config whose setting matches ours (zero-shot, generative, reasoning before the answer):
the target is "(B)", compared by exact_match ignoring case and punctuation, after one of its two
filters (kept as `acc_flexible` and `acc_strict`); the primary reads only a stated answer:

- `acc` (primary): the answer the reply states: the letter in its last \\boxed{...} when that
  box holds one option letter ("\\boxed{B}", "\\boxed{(B)}"), else the letter after its last
  answer phrase ("The answer is (B)", "the correct answer is **Option B**", "Answer: B",
  "the correct option is (B)"); a reply that states none has no answer and scores 0. Small
  instruct models drift from the requested "(X)" (Qwen's math habit "The answer is
  \\boxed{C}.": 7 of the 0.5B's first 67 mmlu replies, which lm-eval's rule read as no answer or
  as an option quoted earlier), and a reply cut at the budget by a repetition loop states
  nothing, yet lm-eval's rule credits the last "(X)" it mentioned while going through the
  options (3 of the 4 loops among the 0.5B's first 76 mmlu replies scored 1 that way). On those
  76 the stated answer equals lm-eval's reading in all 72 replies that state one.
- `acc_flexible`: lm-eval's "flexible-extract" alone, kept so numbers compare with lm-eval's.
- `acc_strict`, its "strict-match": the text right after "The answer is " / "answer is " /
  "The answer: " / "The final answer: " must be the letter.
- `extracted`: 1.0 if the primary rule found a letter at all (0.0: no answer, e.g. a reply cut
  at the token budget before its last sentence).

lm-eval's ARC and CommonsenseQA configs are log-likelihood only, so the same rule serves them;
it is generic in the number of choices (3 to 5 here). The prompt (question, lettered options,
"Think step by step, then finish with the sentence "The answer is (X)."") is this project's,
worded so that both of lm-eval's filters can read the answer. Budget: the tasks' 1024 tokens; measured cut and no-answer shares per model: docs/validity.md.
"""

from __future__ import annotations

import re

from tasks.base import user_message
from tasks.rules import INVALID, exact_match, last_boxed, multi_choice_extract, regex_extract, unbox

# Copied from lm-eval's mmlu/flan_cot_zeroshot/_mmlu_flan_cot_zeroshot_template_yaml
# (tests/test_scoring_lmeval.py asserts they still equal the installed YAML).
STRICT_PATTERN = (
    r"((?<=The answer is )(.*)(?=.)|(?<=answer is )(.*)(?=.)"
    r"|(?<=The answer: )(.*)(?=.)|(?<=The final answer: )(.*)(?=.))"
)
FLEXIBLE_PATTERN = r"(\([A-Z]\))"
LETTERS = "ABCDEFGHIJ"


def choice_prompt(question: str, choices: list[str]) -> tuple:
    """The chat prompt: question, lettered options, and the answer format the scorer reads."""
    options = "\n".join(f"({LETTERS[i]}) {c}" for i, c in enumerate(choices))
    letters = ", ".join(LETTERS[: len(choices)])
    return user_message(
        f"{question.strip()}\n\n{options}\n\n"
        "Think step by step, then finish with the sentence "
        f'"The answer is (X)." where X is the letter of the correct option ({letters}).'
    )


def score_choice(completion: str, choices: list[str], gold: str) -> dict[str, float]:
    """{"acc": primary, "acc_flexible", "acc_strict": lm-eval's two, "extracted": found} for a
    reply to `choice_prompt`; gold is a letter."""
    target = f"({gold})"
    flexible = multi_choice_extract(
        completion, choices, FLEXIBLE_PATTERN, -1, ignore_case=True, ignore_punctuation=True
    )
    strict = regex_extract(completion, STRICT_PATTERN)
    stated = boxed_letter(completion, len(choices)) or stated_letter(completion, len(choices))
    primary = f"({stated})" if stated else INVALID

    def score(pred: str) -> float:
        return exact_match(pred, target, ignore_case=True, ignore_punctuation=True)

    return {
        "acc": score(primary),
        "acc_flexible": score(flexible),
        "acc_strict": score(strict),
        "extracted": float(primary != INVALID),
    }


# "answer is (B)", "correct answer is **Option B**", "Answer: B", "the correct option is (B)";
# the words in any case, the letter a capital ("This option is a repetition" states nothing)
ANSWER_PHRASE = re.compile(
    r"(?i:answer|option|choice)(?:\s+is|:)\s*[:\-]?\s*\**\s*(?i:option\s*|choice\s*)?"
    r"\(?\**([A-J])\**\)?(?![A-Za-z])"
)


def stated_letter(completion: str, n_choices: int) -> str | None:
    """The option letter after the reply's last answer phrase (ANSWER_PHRASE), or None."""
    found = [m for m in ANSWER_PHRASE.findall(completion) if m in LETTERS[:n_choices]]
    return found[-1] if found else None


def boxed_letter(completion: str, n_choices: int) -> str | None:
    """The option letter in the last \\boxed{...} ("\\boxed{B}", "\\boxed{(B)}",
    "\\boxed{\\text{B}}"), or None when there is no box or it holds anything else."""
    box = last_boxed(completion)
    if box is None:
        return None
    inner = unbox(box).strip()
    for wrap in ("\\text{", "\\textbf{", "\\mathrm{"):
        if inner.startswith(wrap) and inner.endswith("}"):
            inner = inner[len(wrap) : -1].strip()
    inner = inner.strip("() .")
    return inner.upper() if len(inner) == 1 and inner.upper() in LETTERS[:n_choices] else None
