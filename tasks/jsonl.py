"""A task without code: a JSONL file of prompts and references, scored by one of the project's scorers.

    hybridbench run --task jsonl --task-arg path=arith.jsonl --task-arg scorer=numeric \\
        --router entropy --split test --out runs/arith-entropy

One JSON object per line:

    {"prompt": "Tom has 3 apples and buys 4 more. How many apples?", "reference": 7}
    {"prompt": "Which gas do plants take in?", "choices": ["Oxygen", "Carbon dioxide"],
     "reference": "B"}

  prompt     the user message (required)
  reference  what the scorer compares with (required): a number (numeric), an option letter
             (choice), the tests (code: a list of assert lines, or a string of test code), a
             summary (rouge), the answer's text (exact)
  id         optional; by default the sha256 of the prompt (and choices), so an id does not
             depend on the row's position in the file
  choices    choice only, required: the option texts, shown lettered (A), (B), ... under the
             prompt with the project's answer instruction ("The answer is (X).")
  system     optional system turn (else the task argument `system=`, else none)

Scorers (`tasks.scorers`), each the one a built-in task uses (so scores mean what they mean
there): numeric (gsm8k's), choice (mmlu's), code (mbpp's), rouge (cnn_dm's), exact (the stated
answer equals the reference, normalized).

Task arguments: path= (required), scorer= (required), name= (default: the file's stem; it names
the task in results and prefixes every example id), max_new_tokens= (default 512), system=.
Splits are those of every hashed task (tasks/base.py): 40% train, 10% calib, 50% test by a hash
of each id, so a file of 40 rows has about 4 calib rows. A bad file stops with one line naming
the file, the line and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from harness.errors import UserError
from tasks import scorers
from tasks.base import Example, Task, system_user, user_message
from tasks.choice import LETTERS, choice_prompt
from tasks.scorers import METRICS, is_number
from tasks.sources import read_jsonl


class JSONLTask(Task):
    """Rows of a JSONL file (see the module docstring), scored by `scorer`."""

    name = "jsonl"

    def __init__(
        self,
        path: str | None = None,
        scorer: str | None = None,
        name: str | None = None,
        max_new_tokens: int = 512,
        system: str | None = None,
    ):
        if not path or not scorer:
            raise UserError(
                "task jsonl needs path=FILE and scorer=" + "|".join(METRICS) + " (task arguments)"
            )
        scorers.check_scorer(scorer, "jsonl")
        self.path, self.scorer = Path(path), scorer
        if not self.path.is_file():
            raise UserError(f"task jsonl: data file {self.path} not found")
        self.name = name or re.sub(r"[^A-Za-z0-9_.-]+", "-", self.path.stem)
        self.metric, self.max_new_tokens, self.system = METRICS[scorer], int(max_new_tokens), system

    def read(self) -> list[Example]:
        rows = read_jsonl(self.path, ("prompt", "reference"))
        if not rows:
            raise UserError(f"{self.path}: no rows")
        examples, seen = [], {}
        for lineno, row in rows:
            where = f"{self.path}:{lineno}"
            prompt, reference, meta = self._check(row, where)
            key = str(row["id"]) if "id" in row else _digest(prompt, meta.get("choices"))
            if key in seen:
                raise UserError(f"{where}: duplicate of line {seen[key]} (id {key})")
            seen[key] = lineno
            system = row.get("system", self.system)
            if self.scorer == "choice":
                messages = choice_prompt(prompt, meta["choices"])
                messages = (({"role": "system", "content": system},) if system else ()) + messages
            else:
                messages = system_user(system, prompt) if system else user_message(prompt)
            examples.append(Example(f"{self.name}/{key}", messages, reference, meta))
        return examples

    def _check(self, row: dict, where: str) -> tuple[str, object, dict]:
        """(prompt, reference, meta) of a row, or one UserError naming the line."""
        prompt, ref = row["prompt"], row["reference"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise UserError(f"{where}: 'prompt' must be a non-empty string")
        if self.scorer == "numeric":
            if not is_number(ref):
                raise UserError(f"{where}: reference {ref!r} is not a number (scorer numeric)")
            return prompt, str(ref), {}
        if self.scorer == "choice":
            choices = row.get("choices")
            if not isinstance(choices, list) or not 2 <= len(choices) <= len(LETTERS):
                raise UserError(f"{where}: scorer choice needs 'choices', a list of 2 to 10 texts")
            letters = LETTERS[: len(choices)]
            if not isinstance(ref, str) or ref.strip("() ").upper() not in letters:
                raise UserError(f"{where}: reference {ref!r} is not one of the letters {letters}")
            return prompt, ref.strip("() ").upper(), {"choices": [str(c) for c in choices]}
        if self.scorer == "code":
            tests = ref if isinstance(ref, str) else None
            if isinstance(ref, list) and ref and all(isinstance(t, str) for t in ref):
                tests = "\n".join(ref)
            if not tests or not tests.strip():
                raise UserError(f"{where}: scorer code needs reference: test code or assert lines")
            return prompt, tests + "\n", {}
        if self.scorer == "exact":
            if (
                isinstance(ref, bool)
                or not isinstance(ref, str | int | float)
                or not str(ref).strip()
            ):
                raise UserError(f"{where}: reference must be the answer's text (scorer exact)")
            return prompt, str(ref), {}
        if not isinstance(ref, str) or not ref.strip():
            raise UserError(f"{where}: reference must be the summary's text (scorer rouge)")
        return prompt, ref, {}

    def score(self, example: Example, completion: str) -> dict[str, float]:
        return scorers.score(self.scorer, example, completion)


def _digest(prompt: str, choices) -> str:
    """An id from the row's content: stable across files and row orders."""
    text = json.dumps([prompt, choices], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
