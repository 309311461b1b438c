"""R2R's critical-divergence labels (harness/training/critical.py) on the tiny pair: the labels
are checked against the pair's own greedy decoding, position by position."""

from __future__ import annotations

import json

import pytest
import torch

from harness.backends.engine import Engine
from harness.core.loop import DecodeConfig
from harness.core.router import LargeOnly, SmallOnly
from harness.errors import UserError
from harness.training import critical
from harness.training.labels import LABEL_SOURCES, TokenLabels, hidden_path
from tasks.base import Example, Task
from tests.tiny import tiny_backends, tiny_tokenizer

BUDGET = 24
QUESTIONS = ("abc", "hello there", "2+2=", "xyz?", "one two", "Q: 7*6")


class Scripted(Task):
    """A task whose scorer says "changed" for the completions in `changed` and "same" for any
    other: the test decides which continuation changes the outcome, the rest is the pipeline."""

    name = "scripted"
    metric = "score"
    max_new_tokens = BUDGET

    def __init__(self, changed=()):
        self.changed = set(changed)

    def read(self):
        return [
            Example(f"scripted/{i}", ({"role": "user", "content": q},), "")
            for i, q in enumerate(QUESTIONS)
        ]

    def score(self, example, completion):
        return {"score": float(completion not in self.changed)}

    def outcome(self, example, completion):
        return "changed" if completion in self.changed else "same"


@pytest.fixture(scope="module")
def engine():
    return Engine(tiny_tokenizer(), tiny_backends(kind="hf"))


def greedy(engine, router, ids, n):
    g = engine.generate(router, ids, DecodeConfig(max_new_tokens=n))
    return list(g.token_ids) + ([engine.eos_ids[-1]] if g.stop_reason == "eos" else [])


def divergences(engine, prompt, answer):
    """Small's greedy next token after each prefix of large's answer, decoded on its own (not
    teacher-forced): {position: small's token} where it is not large's."""
    out = {}
    for i, tok in enumerate(answer):
        (s,) = greedy(engine, SmallOnly(), prompt + answer[:i], 1)[:1] or [engine.eos_ids[-1]]
        if s != tok:
            out[i] = s
    return out


def test_a_continuation_that_changes_the_outcome_is_critical_one_that_does_not_neutral(
    engine, tmp_path
):
    ex = Scripted().load()[0]
    prompt = engine.encode(ex.messages)
    answer = greedy(engine, LargeOnly(), prompt, BUDGET)
    div = divergences(engine, prompt, answer)
    assert len(div) >= 2
    p1, p2 = sorted(div)[:2]
    # large continuing greedily after small's token at p1, decoded here on its own
    head = answer[:p1] + [div[p1]]
    changed = engine.decode(head + greedy(engine, LargeOnly(), prompt + head, BUDGET - p1 - 1))
    task = Scripted(changed={changed})
    cfg = critical.CriticalConfig(positions=0)
    data = critical.build_critical(engine, task, [ex], cfg, tmp_path)
    label, source = data["label"].tolist(), data["label_source"].tolist()
    assert data["context_token"].tolist() == answer  # the trajectory is large's answer
    assert (label[p1], LABEL_SOURCES[source[p1]]) == (0, "critical")
    assert (label[p2], LABEL_SOURCES[source[p2]]) == (1, "neutral")
    for i in range(len(answer)):  # small's token equal to large's: agree, small suffices
        if i not in div:
            assert (label[i], LABEL_SOURCES[source[i]]) == (1, "agree")
    assert data["small_token"][sorted(div)].tolist() == [div[i] for i in sorted(div)]
    s = critical.stats(data)
    assert (s["divergences"], s["rolled_out"], s["critical"]) == (len(div), len(div), 1)
    assert s["critical_token_share"] == pytest.approx(1 / len(answer))  # every one rolled out
    assert json.loads((tmp_path / critical.STATS).read_text()) == s
    # without the changed continuation among its completions, every divergence is neutral
    other = critical.build_critical(engine, Scripted(), [ex], cfg, tmp_path / "b")
    assert critical.stats(other)["critical"] == 0


def test_caps_are_seeded_and_labels_resume_from_the_records(engine, tmp_path, monkeypatch, capsys):
    task = Scripted()
    train = task.load()
    picked = critical.pick_examples(train, 4, seed=3)
    assert picked == critical.pick_examples(train, 4, seed=3)
    assert [train.index(e) for e in picked] == sorted(train.index(e) for e in picked)
    assert critical.pick_examples(train, 0, seed=3) == train
    cfg = critical.CriticalConfig(positions=2, seed=3)
    data = critical.build_critical(engine, task, picked, cfg, tmp_path, group=1)
    records = [json.loads(x) for x in (tmp_path / critical.RECORDS).read_text().splitlines()]
    assert [r["id"] for r in records[1:]] == [e.id for e in picked]  # one line per example
    for r in records[1:]:
        assert len(r["rolled"]) == min(2, r["divergences"])
    # the label file lost: made again from the records by teacher forcing, nothing decoded
    (tmp_path / critical.LABELS).unlink()
    hidden_path(tmp_path / critical.LABELS).unlink()
    monkeypatch.setattr(critical, "label_group", lambda *a, **k: pytest.fail("decoded again"))
    capsys.readouterr()
    again = critical.build_critical(engine, task, picked, cfg, tmp_path, group=1)
    made = "critical labels (made again from rollouts): 100%|"
    assert made in capsys.readouterr().err  # the teacher-forced pass shows its progress
    for c in ("label", "label_source", "small_token", "context_token", "hidden"):
        assert torch.equal(again[c], data[c]), c
    assert TokenLabels.load(tmp_path / critical.LABELS).meta["done"] == [e.id for e in picked]
    head = critical.header(task.name, cfg, 0)
    assert critical.finished(tmp_path, head, [e.id for e in picked])
    other = critical.CriticalConfig(positions=3, seed=3)
    with pytest.raises(UserError, match="other settings"):
        critical.build_critical(engine, task, picked, other, tmp_path)


def test_a_task_outcome_is_its_final_answer_or_its_verdict():
    from tasks import get_task

    gsm = get_task("gsm8k")
    ex = gsm.load()[0]
    assert gsm.outcome(ex, "so \\boxed{1,250}.") == gsm.outcome(ex, "#### 1250.00") == "1250.0"
    assert gsm.outcome(ex, "so 12") != gsm.outcome(ex, "so 13")
    mbpp = get_task("mbpp")
    code = mbpp.load()[0]
    assert mbpp.outcome(code, "no code") == repr(0.0)


def test_an_interrupted_group_resumes_after_its_finished_examples(engine, tmp_path, monkeypatch):
    """Each example's record is appended as soon as its last continuation is done: a group
    interrupted midway keeps those, and the rerun decodes only the others."""
    task, cfg = Scripted(), critical.CriticalConfig(positions=2)
    examples = task.load()[:3]
    real = critical.continuations

    def first_only(engine, task, todo, budget):
        first = min(key[0] for key, *_ in todo)
        yield from real(engine, task, [t for t in todo if t[0][0] == first], budget)
        raise RuntimeError("interrupted")

    monkeypatch.setattr(critical, "continuations", first_only)
    with pytest.raises(RuntimeError, match="interrupted"):
        critical.build_critical(engine, task, examples, cfg, tmp_path, group=3)
    lines = (tmp_path / critical.RECORDS).read_text().splitlines()
    assert examples[0].id in {json.loads(x).get("id") for x in lines[1:]}
    monkeypatch.setattr(critical, "continuations", real)
    decoded = []
    real_answers = critical.large_answers

    def answers(engine, task, prompts, budget):
        decoded.extend(prompts)
        return real_answers(engine, task, prompts, budget)

    monkeypatch.setattr(critical, "large_answers", answers)
    data = critical.build_critical(engine, task, examples, cfg, tmp_path, group=3)
    assert 0 not in decoded and sorted(data.meta["done"]) == sorted(e.id for e in examples)
    fresh = critical.build_critical(engine, task, examples, cfg, tmp_path / "fresh", group=3)
    for c in ("label", "label_source", "small_token"):  # the same labels as uninterrupted
        ours = torch.cat([data[c][data.rows_of(j)] for j in range(3)])
        theirs = torch.cat([fresh[c][fresh.rows_of(j)] for j in range(3)])
        assert torch.equal(ours, theirs), c


class Duck:
    """A plugin task that is no `tasks.base.Task` and has no `outcome`."""

    name, metric, max_new_tokens, stop = "duck", "acc", 8, ()

    def read(self):
        return Scripted().read()

    def score(self, example, completion):
        return {"acc": float("quack" in completion)}


def test_a_plugin_task_s_outcome_is_its_own_or_its_metric():
    from tasks import get_task

    scripted = get_task("tests.test_r2r_labels:Scripted")
    ex = scripted.load()[0]
    assert scripted.outcome(ex, "anything") == "same"  # its own, through the guard
    duck = get_task("tests.test_r2r_labels:Duck")
    assert duck.outcome(ex, "quack") == repr(1.0) and duck.outcome(ex, "moo") == repr(0.0)
