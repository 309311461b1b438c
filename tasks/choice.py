"""Letter-answer multiple choice (mmlu, arc_challenge, commonsense_qa): one prompt, one scorer.

The rule is lm-eval's zero-shot chain-of-thought MMLU (`mmlu_flan_cot_zeroshot`), the lm-eval
config whose setting matches ours (zero-shot, generative, reasoning before the answer):
the target is "(B)", compared by exact_match ignoring case and punctuation, after one of its two
filters:

- `acc` (primary), its "flexible-extract": the last "(X)" in the reply; else the last choice
  text quoted; else a letter after a colon ("Answer: B"). Small instruct models often drift from
  the requested format ("the answer is (B) because ...", "Answer: B"); the flexible rule scores
  what they meant, so routers are compared on knowledge rather than on format-following.
- `acc_strict`, its "strict-match": the text right after "The answer is " / "answer is " /
  "The answer: " / "The final answer: " must be the letter.
- `extracted`: 1.0 if the flexible rule found a letter at all (0.0: no answer, e.g. a reply cut
  at the token budget before its last sentence).

lm-eval's ARC and CommonsenseQA configs are log-likelihood only, so the same rule serves them;
it is generic in the number of choices (3 to 5 here). The prompt (question, lettered options,
"Think step by step, then finish with the sentence "The answer is (X)."") is this project's,
worded so that both of lm-eval's filters can read the answer. Budget: the tasks' 1024 tokens
(was 256, set without a measurement); measured cut and no-answer shares per model:
docs/issue11-results.md.
"""

from __future__ import annotations

from tasks.base import user_message
from tasks.rules import INVALID, exact_match, multi_choice_extract, regex_extract

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
    """{"acc": flexible, "acc_strict": strict, "extracted": found} for a reply to `choice_prompt`; gold is a letter."""
    target = f"({gold})"
    flexible = multi_choice_extract(
        completion, choices, FLEXIBLE_PATTERN, -1, ignore_case=True, ignore_punctuation=True
    )
    strict = regex_extract(completion, STRICT_PATTERN)
    return {
        "acc": exact_match(flexible, target, ignore_case=True, ignore_punctuation=True),
        "acc_strict": exact_match(strict, target, ignore_case=True, ignore_punctuation=True),
        "extracted": float(flexible != INVALID),
    }
