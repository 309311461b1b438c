"""The task protocol: examples with a chat prompt, a seeded disjoint split, and a pure scorer.

A task is a small class (nanochat style) with four things: `read()` its rows as `Example`s,
the chat prompt inside each example, a `split()` of them, and `score(example, completion)`.
The runner applies the tokenizer's chat template to `example.messages`, decodes, and calls
`score`; `score` is pure (code tasks run the completion in `harness.sandbox`, nothing else).

Splits
------
GSM8K, MBPP, HumanEval, ARC, CommonsenseQA and MATH-500 ship no train split, yet the routers that
learn (reward model, CITER's MLP, query router) need training and calibration data that the
evaluation never sees. Every task therefore has a seeded, documented, disjoint split:

- Hashed tasks (gsm8k, mbpp, humaneval, commonsense_qa, math500, cnn_dm): with
  u = sha256(f"{seed}/{example.id}") read as a fraction in [0, 1),
  train if u < 0.4, calib if u < 0.5, test otherwise (40% / 10% / 50%).
- Tasks with a real held-out split (`held_out` set: mmlu, arc_challenge): `test` is the
  published test set whatever the seed (MMLU test 14042, ARC-Challenge test 1172), so their test
  scores compare with published ones; the other rows (MMLU dev+validation, ARC validation)
  are hashed 80% train / 20% calib.

A bucket depends only on (seed, id), not on row order or on which other rows were loaded, so the
split is stable across calls and machines, and the same for a subset (MMLU `subject=`).
`all` is every row. `check_disjoint` is the guard the runner calls before evaluating a router
that was trained or calibrated on some example ids.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from harness.errors import UserError

SPLITS = ("train", "calib", "test", "all")
TRAIN_FRACTION, CALIB_FRACTION = 0.4, 0.1  # hashed tasks; test gets the remaining 0.5
HELD_OUT_TRAIN_FRACTION = 0.8  # tasks with a real test set: train share of the other rows


@dataclass(frozen=True)
class Example:
    """One benchmark item, ready for the runner. Hashable by `id` alone."""

    id: str  # stable across runs and machines, e.g. "gsm8k/test/17", "mbpp/11", "HumanEval/0"
    messages: tuple = field(hash=False)  # chat turns ({"role": "user", "content": ...},)
    reference: object = field(hash=False)  # gold answer in the task's own form
    meta: dict = field(default_factory=dict, hash=False)  # what score() needs besides reference


def bucket(example_id: str, seed: int) -> float:
    """A fraction in [0, 1) fixed by (seed, id): `bucket("gsm8k/test/0", 0)` is always the same."""
    digest = hashlib.sha256(f"{seed}/{example_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Task:
    """Base of every task: subclasses set the class attributes and write `read` and `score`."""

    name: str = ""  # registry name
    metric: str = ""  # primary key of score()'s dict, e.g. "exact_match", "pass@1", "acc"
    max_new_tokens: int = 256  # default generation budget for the task
    stop: tuple[str, ...] = ()  # stop strings; chat models also stop at their EOS token
    held_out: str | None = None  # meta["source"] value forming `test`; None: hashed split

    def read(self) -> list[Example]:
        """Every row, in a deterministic order (called once; `load` caches)."""
        raise NotImplementedError

    def score(self, example: Example, completion: str) -> dict[str, float]:
        """Pure: metric name -> value for one completion; includes `self.metric`."""
        raise NotImplementedError

    def reference_answer(self, example: Example) -> str | None:
        """The reference answer written as a model answering this prompt should write it (CITER's
        reference trajectory, `harness.training.labels`), or None when the task has none."""
        return None

    def outcome(self, example: Example, completion: str) -> str:
        """What decides whether two answers to `example` lead to the same place (R2R's critical
        divergences, `harness.training.critical`): by default the primary metric's value (a code
        task: the tests' verdict); a task with a final answer (gsm8k) returns that answer."""
        return repr(float(self.score(example, completion)[self.metric]))

    def load(self) -> list[Example]:
        """All rows, deterministic order, read once per task object."""
        if getattr(self, "_examples", None) is None:
            examples = self.read()
            ids = [ex.id for ex in examples]
            if len(set(ids)) != len(ids):
                raise UserError(f"task {self.name}: example ids are not unique")
            self._examples = examples
        return list(self._examples)

    def split_of(self, example: Example, seed: int = 0) -> str:
        """The split ("train", "calib" or "test") that `example` falls in under `seed`."""
        u = bucket(example.id, seed)
        if self.held_out is not None:
            if example.meta.get("source") == self.held_out:
                return "test"
            return "train" if u < HELD_OUT_TRAIN_FRACTION else "calib"
        if u < TRAIN_FRACTION:
            return "train"
        return "calib" if u < TRAIN_FRACTION + CALIB_FRACTION else "test"

    def split(self, name: str, seed: int = 0) -> list[Example]:
        """The examples of split `name` ("train" | "calib" | "test" | "all"), in load order."""
        if name not in SPLITS:
            raise UserError(f"unknown split {name!r}; valid splits: {', '.join(SPLITS)}")
        examples = self.load()
        if name == "all":
            return examples
        return [ex for ex in examples if self.split_of(ex, seed) == name]


def check_disjoint(used_ids: set[str], eval_ids: list[str], what: str) -> None:
    """Refuse to evaluate `what` (e.g. "router reward") on examples it was trained/calibrated on."""
    overlap = [i for i in eval_ids if i in used_ids]
    if overlap:
        raise UserError(
            f"{what} was trained/calibrated on {len(overlap)} of these {len(eval_ids)} "
            f"examples (e.g. {overlap[0]}); evaluate on a split it has not seen"
        )


def user_message(content: str) -> tuple:
    """A one-turn chat: the shape of `Example.messages` for the zero-shot tasks here."""
    return ({"role": "user", "content": content},)


def system_user(system: str, content: str) -> tuple:
    """A system turn then a user turn (gsm8k, math500: Qwen's own math-evaluation format).

    The runner applies the tokenizer's chat template to these messages; Qwen2.5's template
    puts this system turn in place of its default one ("You are Qwen, created by ...").
    """
    return ({"role": "system", "content": system}, {"role": "user", "content": content})


class GuardedTask:
    """A task from outside this repository (an entry point or an import path) behind checks.

    `tasks.get_task` wraps such a task: an exception from its code, or an answer of the wrong
    shape (examples that are not `Example`s, a score that is not a dict of numbers holding the
    task's metric), stops the command with one error line naming the task; a run stopped that way
    keeps what it recorded, and the same command resumes once the task is fixed. Attributes
    (name, metric, max_new_tokens, stop, ...) pass through."""

    def __init__(self, task, label: str):
        self.task, self.label = task, label
        if not isinstance(getattr(task, "metric", None), str) or not task.metric:
            raise self.error("sets no `metric` (the key of score()'s dict to rank by)")
        if not isinstance(getattr(task, "name", None), str) or not task.name:
            raise self.error("sets no `name`")

    def __getattr__(self, attr):
        if attr.startswith("__") or attr in ("task", "label"):  # copying a half-built one
            raise AttributeError(attr)
        return getattr(self.task, attr)

    def error(self, what: str) -> UserError:
        return UserError(f"task {self.label}: {what}; fix the task and run the same command again")

    def _call(self, method: str, *args):
        try:
            return getattr(self.task, method)(*args)
        except UserError:
            raise
        except Exception as e:
            raise self.error(f"{method} raised {type(e).__name__}: {e}") from e

    def _examples(self, method: str, *args) -> list[Example]:
        examples = self._call(method, *args)
        bad = next((x for x in examples if not isinstance(x, Example)), None)
        if bad is not None:
            raise self.error(f"{method} gave a {type(bad).__name__}, not a tasks.base.Example")
        return list(examples)

    def outcome(self, example: Example, completion: str) -> str:
        """The task's own `outcome` when it has one, else the base's (its metric's value)."""
        if callable(getattr(self.task, "outcome", None)):
            return str(self._call("outcome", example, completion))
        return Task.outcome(self, example, completion)

    def read(self) -> list[Example]:
        return self._examples("read")

    def load(self) -> list[Example]:
        return self._examples("load")

    def split(self, name: str, seed: int = 0) -> list[Example]:
        return self._examples("split", name, seed)

    def score(self, example: Example, completion: str) -> dict[str, float]:
        scores = self._call("score", example, completion)
        if not isinstance(scores, dict) or self.task.metric not in scores:
            raise self.error(f"score returned {scores!r}, not a dict holding {self.task.metric!r}")
        try:
            return {str(k): float(v) for k, v in scores.items()}
        except (TypeError, ValueError):
            raise self.error(f"score returned {scores!r}: its values must be numbers") from None
