"""CNN/DailyMail-style summarization: ROUGE-1/2/Lsum F-measure of a summary against `highlights`.

CNN/DailyMail is in no installed package and this repository ships no news articles, so the data
is a JSONL the user supplies (`path=`), one object per line with `article` and `highlights`
(summary sentences separated by newlines) and optionally `id`. Without `path`, the task reads
`tasks/data/tiny_summaries.jsonl`, eight fictional paragraphs written for this project
(see tasks/data/README.md): enough for tests and CI, not a benchmark.

Scores are `rouge_score.RougeScorer(["rouge1", "rouge2", "rougeLsum"], use_stemmer=True)`
F-measures in [0, 1] (multiply by 100 for the usual tables). rougeLsum compares sentence by
sentence, so both texts are put one sentence per line first (newlines, then ". ", "! ", "? ").

Budget 256 tokens (two or three sentences); measured summary lengths of the default pair: docs/validity.md.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

from harness.errors import UserError
from tasks.base import Example, Task, user_message
from tasks.sources import read_jsonl

DEFAULT = Path(__file__).parent / "data" / "tiny_summaries.jsonl"
PROMPT = "Summarize the following article in two or three sentences.\n\nArticle:\n{article}"
METRICS = ("rouge1", "rouge2", "rougeLsum")


def one_sentence_per_line(text: str) -> str:
    """ "A b. C d!\\nE" -> "A b.\\nC d!\\nE" (what rougeLsum expects)."""
    lines = (s.strip() for line in text.splitlines() for s in re.split(r"(?<=[.!?])\s+", line))
    return "\n".join(s for s in lines if s)


class CnnDm(Task):
    name = "cnn_dm"
    metric = "rougeLsum"
    max_new_tokens = 256  # two or three sentences; measured: docs/validity.md

    def __init__(self, path: str | None = None):
        self.path = Path(path) if path else DEFAULT  # JSONL with article, highlights[, id]
        if not self.path.is_file():
            raise UserError(f"cnn_dm: data file {self.path} not found")

    def read(self) -> list[Example]:
        examples, seen = [], {}
        for lineno, row in read_jsonl(self.path, ("article", "highlights")):
            key = row.get("id")
            if key is None:  # the article's hash: stable across files and row orders
                key = hashlib.sha256(row["article"].encode()).hexdigest()[:16]
            if key in seen:
                raise UserError(f"{self.path}:{lineno}: duplicate of line {seen[key]} (id {key})")
            seen[key] = lineno
            examples.append(
                Example(
                    id=f"cnn_dm/{key}",
                    messages=user_message(PROMPT.format(article=row["article"].strip())),
                    reference=row["highlights"],
                    meta={},
                )
            )
        return examples

    def score(self, example: Example, completion: str) -> dict[str, float]:
        scores = _scorer().score(
            one_sentence_per_line(str(example.reference)), one_sentence_per_line(completion)
        )
        return {
            **{m: scores[m].fmeasure for m in METRICS},
            "extracted": float(bool(completion.strip())),  # an empty reply has no summary
        }


@functools.cache
def _scorer():
    """The RougeScorer, built on first use (not at import: it loads nltk's stemmer)."""
    from rouge_score.rouge_scorer import RougeScorer

    return RougeScorer(list(METRICS), use_stemmer=True)
