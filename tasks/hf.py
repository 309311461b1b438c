"""Any `datasets` dataset as a task, without code: name the dataset, its columns and a scorer.

    hybridbench run --task hf --task-arg dataset=data/arith.parquet --task-arg prompt=question \\
        --task-arg reference=answer --task-arg scorer=numeric --router entropy --out runs/arith

Task arguments:

  dataset    a local data file (parquet, json/jsonl, csv/tsv, arrow, txt; gzipped too), a folder
             (data files named by split, or a `save_to_disk` folder), or a Hub id ("openai/gsm8k":
             read from the `datasets` cache with HF_DATASETS_OFFLINE=1, never fetched then)
  config     the dataset's configuration (Hub datasets with several, e.g. gsm8k's "main")
  revision   a Hub revision (branch, tag or commit) to pin
  split      the dataset split to evaluate (default: its only split, else "test")
  train_split  optional: a second dataset split whose rows become train/calib, leaving `split`
             whole as the held-out test (as mmlu's test set is); without it, `split`'s rows are
             hashed 40/10/50 into train/calib/test like every hashed task (tasks/base.py)
  prompt     the user turn: a column name, or a Jinja template over several columns
             ("Question: {{question}}\\nContext: {{context}}", lm-eval's doc_to_text syntax)
  system     optional system turn (text or a template)
  reference  the column (or template) holding the gold answer: a number (numeric), the
             answer's text (exact), an option (choice: index, letter, label or the option's text)
             or the gold code (code, optional there)
  choices    choice: the column of option texts (a list, or ARC's {"label": [...], "text": [...]})
  tests      code: the column of tests (a list of assert lines, or test code)
  id         a column of unique ids (default: a digest of the prompt, so no id depends on a
             row's position)
  scorer     numeric | exact | choice | code | rouge (`tasks.scorers`)
  name       the task's name in results and the prefix of every id (default: the dataset's)
  max_new_tokens  default 512
  lm_eval_task, include_path   take the above from an lm-eval task YAML (`tasks.lmeval_yaml`);
             arguments given here win over the YAML's

A missing dataset, split or column, or a Hub id not cached while offline, stops with one line.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
from pathlib import Path

from harness.errors import UserError
from tasks import scorers
from tasks.base import Example, Task, user_message
from tasks.choice import LETTERS, choice_prompt
from tasks.loading import load, pick_split, require_columns


class HFTask(Task):
    """Rows of a `datasets` dataset (see the module docstring), scored by `scorer`."""

    name = "hf"

    def __init__(
        self,
        dataset: str | None = None,
        scorer: str | None = None,
        prompt: str | None = None,
        reference: str | None = None,
        config: str | None = None,
        split: str | None = None,
        train_split: str | None = None,
        system: str | None = None,
        choices: str | None = None,
        tests: str | None = None,
        id: str | None = None,
        name: str | None = None,
        max_new_tokens: int | None = None,
        revision: str | None = None,
        lm_eval_task: str | None = None,
        include_path: str | None = None,
    ):
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        if lm_eval_task:
            from tasks.lmeval_yaml import task_arguments

            given = {**task_arguments(str(lm_eval_task), include_path), **_set(given)}
        a = {
            k: (str(v) if isinstance(v, int | float) and k != "max_new_tokens" else v)
            for k, v in given.items()
        }
        if not a.get("dataset") or not a.get("scorer"):
            raise UserError(
                "task hf needs dataset=PATH_OR_HUB_ID and scorer="
                + "|".join(scorers.METRICS)
                + " (task arguments; or lm_eval_task=NAME)"
            )
        self.scorer = scorers.check_scorer(a["scorer"], "hf")
        if not a.get("prompt"):
            raise UserError("task hf needs prompt=COLUMN (or a template over columns)")
        need = {"code": "tests", "choice": "choices"}.get(self.scorer)
        if need and not a.get(need):
            raise UserError(f"task hf: scorer {self.scorer} needs {need}=COLUMN")
        if self.scorer != "code" and not a.get("reference"):
            raise UserError(f"task hf: scorer {self.scorer} needs reference=COLUMN")
        self.args = a
        self.metric = scorers.METRICS[self.scorer]
        self.max_new_tokens = int(a.get("max_new_tokens") or 512)
        self.stop = tuple(a.get("stop") or ())
        self.name = a.get("name") or _default_name(a["dataset"], a.get("config"))
        # with a train split, `split` is a real held-out test set (meta["source"] names it)
        self.held_out = (a.get("split") or "test") if a.get("train_split") else None
        if self.held_out is not None and self.held_out == a["train_split"]:
            raise UserError(f"task hf: train_split and split are both {self.held_out!r}")

    def read(self) -> list[Example]:
        a = self.args
        splits = load(a["dataset"], a.get("config"), a.get("revision"), a.get("data_files"))
        dataset = _label(a["dataset"], a.get("data_files"), a.get("split"))
        test = pick_split(splits, a.get("split"), dataset)
        parts = [(self.held_out, test)]
        if self.held_out is not None:
            parts.append((a["train_split"], pick_split(splits, a["train_split"], dataset)))
        examples, seen = [], {}
        for source, data in parts:
            if a.get("process_docs"):
                data = _call(a["process_docs"], data, f"{dataset} [{source or 'rows'}]")
            fields = _Fields(a, list(data.column_names), dataset)
            require_columns(data, fields.columns(), dataset)
            for i, row in enumerate(data):
                where = f"{dataset} [{source or 'row'} {i}]"
                example = self._example(fields, row, where, source)
                if example.id in seen:
                    raise UserError(
                        f"{where}: same id as {seen[example.id]} ({example.id}); "
                        "name a column of unique ids (id=)"
                    )
                seen[example.id] = where
                examples.append(example)
        if not examples:
            raise UserError(f"dataset {dataset}: no rows")
        return examples

    def _example(self, fields: _Fields, row: dict, where: str, source: str) -> Example:
        prompt = fields.text("prompt", row, where)
        if not prompt.strip():
            raise UserError(f"{where}: the prompt is empty")
        meta: dict = {"source": source} if source else {}
        reference = fields.value("reference", row, where)
        if self.scorer == "choice":
            texts, labels = fields.choices(row, where)
            letter = scorers.choice_letter(reference, texts, labels)
            if letter is None:
                raise UserError(
                    f"{where}: reference {reference!r} names none of the {len(texts)} options"
                )
            reference, meta["choices"] = letter, texts
            messages = choice_prompt(prompt, texts)
        else:
            messages = user_message(prompt)
        if self.scorer == "numeric" and not scorers.is_number(reference):
            raise UserError(f"{where}: reference {reference!r} is not a number (scorer numeric)")
        if self.scorer == "code":
            meta["tests"] = fields.tests(row, where)
            reference = "" if reference is None else str(reference)
        elif self.scorer in ("exact", "rouge", "numeric"):
            reference = str(reference).strip() if self.scorer != "rouge" else str(reference)
        system = fields.text("system", row, where) if self.args.get("system") else None
        if system:
            messages = ({"role": "system", "content": system}, *messages)
        key = fields.text("id", row, where) if self.args.get("id") else _digest(prompt, meta)
        return Example(f"{self.name}/{key}", tuple(messages), reference, meta)

    def score(self, example: Example, completion: str) -> dict[str, float]:
        return scorers.score(self.scorer, example, completion)


class _Fields:
    """How each task argument reads a row: a column by name, a Jinja template over columns, or
    (from an lm-eval YAML) a function of the row."""

    def __init__(self, args: dict, columns: list[str], dataset: str):
        self.args, self.have, self.dataset = args, columns, dataset

    def columns(self) -> list[str]:
        """The columns the arguments name directly (a template's are checked as it renders: an
        lm-eval template may test `x is defined`)."""
        out = []
        for key in ("prompt", "reference", "choices", "tests", "id"):
            spec = self.args.get(key)
            if isinstance(spec, str) and not _is_template(spec) and spec not in out:
                out.append(spec)
        return out

    def value(self, key: str, row: dict, where: str):
        spec = self.args.get(key)
        if spec is None:
            return None
        if callable(spec):  # an lm-eval YAML's !function
            return _call(spec, row, where)
        if spec in row:
            return row[spec]
        if _is_template(spec):
            return self.render(spec, row, where)
        return spec  # a system turn written out

    def render(self, template: str, row: dict, where: str) -> str:
        """A Jinja template filled from a row, as lm-eval fills doc_to_text (StrictUndefined)."""
        import jinja2

        try:
            return _compiled(template).render(**row)
        except jinja2.UndefinedError as e:
            name = re.match(r"'(\w+)' is undefined", str(e))
            if name and name.group(1) not in row:
                raise UserError(
                    f"dataset {self.dataset} has no column {name.group(1)!r}; "
                    f"its columns: {', '.join(self.have)}"
                ) from None
            raise UserError(f"{where}: template {template!r}: {e}") from None
        except jinja2.TemplateError as e:
            raise UserError(f"{where}: template {template!r}: {e}") from None

    def text(self, key: str, row: dict, where: str) -> str:
        value = self.value(key, row, where)
        return value if isinstance(value, str) else "" if value is None else str(value)

    def choices(self, row: dict, where: str) -> tuple[list[str], list[str] | None]:
        value = self.value("choices", row, where)
        if isinstance(value, str):  # a template that renders a list, as lm-eval's doc_to_choice
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                value = None
        labels = None
        if isinstance(value, dict) and "text" in value:  # ARC / CommonsenseQA: label + text
            labels, value = [str(x) for x in value.get("label") or []] or None, value["text"]
        if not isinstance(value, list | tuple) or not 2 <= len(value) <= len(LETTERS):
            raise UserError(f"{where}: choices must be a list of 2 to {len(LETTERS)} options")
        return [str(c) for c in value], labels

    def tests(self, row: dict, where: str) -> str:
        value = self.value("tests", row, where)
        if isinstance(value, list | tuple) and all(isinstance(t, str) for t in value):
            value = "\n".join(value)
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"{where}: tests must be test code or a list of assert lines")
        try:
            ast.parse(value)
        except SyntaxError as e:
            raise UserError(f"{where}: the tests do not parse as Python ({e.msg})") from None
        return value + "\n"


def _call(function, value, where: str):
    """A function an lm-eval YAML names, its failure one line."""
    try:
        return function(value)
    except UserError:
        raise
    except Exception as e:
        name = getattr(function, "__name__", "function")
        raise UserError(f"{where}: {name} raised {type(e).__name__}: {e}") from None


def _is_template(spec: str) -> bool:
    return "{{" in spec or "{%" in spec


@functools.cache
def _compiled(template: str):
    """The Jinja template, in lm-eval's environment (StrictUndefined, its regex_replace filter)."""
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["regex_replace"] = lambda s, pattern, repl, count=0: re.sub(
        pattern, repl, s, count=count
    )
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise UserError(f"template {template!r}: {e.message}") from None


def _label(dataset: str, data_files, split: str | None) -> str:
    """What errors call the dataset: its path or id, or for a builder over data files (an
    lm-eval YAML's `dataset_path: json`) the file of the split read."""
    if isinstance(data_files, dict):
        files = data_files.get(split) or next(iter(data_files.values()))
        return str(files if isinstance(files, str) else files[0])
    return str(data_files) if isinstance(data_files, str) else dataset


def _set(given: dict) -> dict:
    return {k: v for k, v in given.items() if v is not None and k != "lm_eval_task"}


def _default_name(dataset: str, config: str | None) -> str:
    """ "data/arith.parquet" -> "arith"; "openai/gsm8k", "main" -> "gsm8k-main"."""
    path = Path(str(dataset))
    stem = path.name.split(".")[0] if path.exists() else str(dataset).rstrip("/").split("/")[-1]
    stem = f"{stem}-{config}" if config else stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem) or "hf"


def _digest(prompt: str, meta: dict) -> str:
    """An id from the row's content: stable across files and row orders."""
    text = json.dumps([prompt, meta.get("choices")], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
