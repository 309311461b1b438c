"""CommonsenseQA: five-option commonsense questions, letter answer A-E (scored as `tasks.choice`).

Rows: validation 1221 (the test split has no public labels), split by hash (see `tasks.base`).

Budget 1024 tokens; measured accuracy, cut and no-answer shares of the default pair: docs/validity.md.
"""

from __future__ import annotations

from tasks.base import Example, Task
from tasks.choice import LETTERS, choice_prompt, score_choice
from tasks.sources import olmo_arrow

DATA = "hf_datasets/tau/commonsense_qa/none/validation/data-00000-of-00001.arrow"


class CommonsenseQA(Task):
    name = "commonsense_qa"
    metric = "acc"
    max_new_tokens = 1024  # measured: docs/validity.md

    def read(self) -> list[Example]:
        examples = []
        for row in olmo_arrow(DATA):
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
