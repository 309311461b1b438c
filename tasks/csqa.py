"""CommonsenseQA: five-option commonsense questions, letter answer A-E (scored as `tasks.choice`).

Rows: validation 1221 (the test split has no public labels), split by hash (see `tasks.base`).

Measured (2026-11-23, llama.cpp, greedy, first 50 test questions, budget 1024;
docs/issue11-results.md): small (0.5B) acc 0.300 [0.180, 0.420], large (1.5B) 0.380 [0.260,
0.520]. Cut at the budget: small 2% (one repetition loop), large 0. No stated answer: small 8%
(the loop, and 3 replies ending with the template's "(X)" copied), large 2% (one "The answer is
(X) E."); above the 2% goal for small, reported, not hidden (a bigger budget changes neither).
"""

from __future__ import annotations

from tasks.base import Example, Task
from tasks.choice import LETTERS, choice_prompt, score_choice
from tasks.sources import olmo_file, read_arrow

DATA = "hf_datasets/tau/commonsense_qa/none/validation/data-00000-of-00001.arrow"


class CommonsenseQA(Task):
    name = "commonsense_qa"
    metric = "acc"
    max_new_tokens = 1024  # measured: docs/issue11-results.md

    def read(self) -> list[Example]:
        examples = []
        for row in read_arrow(olmo_file(DATA)):
            labels, texts = row["choices"]["label"], row["choices"]["text"]
            examples.append(
                Example(
                    id=f"commonsense_qa/{row['id']}",
                    messages=choice_prompt(row["question"], texts),
                    reference=LETTERS[labels.index(row["answerKey"])],
                    meta={"choices": texts, "concept": row["question_concept"]},
                )
            )
        return examples

    def score(self, example: Example, completion: str) -> dict[str, float]:
        return score_choice(completion, example.meta["choices"], example.reference)
