"""`hybridbench compare`: the flagging rules on synthetic runs, and a degraded router on tiny runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.core.run_folder import RunFolder
from harness.metrics.compare import compare, report

MANIFEST = {"task": "t", "split": "test", "metric": "acc", "router": "r", "router_args": {}}


def write_run(
    folder: Path, scores, seconds_per_token=0.01, failed=0, manifest=None, large=()
) -> Path:
    """A run folder with one record per score: 10 tokens each, timed `seconds_per_token`, the
    first `large[i]` of example i's from large (none where `large` is shorter)."""
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({**MANIFEST, **(manifest or {})}))
    lines = []
    for i, s in enumerate(scores):
        k = large[i] if i < len(large) else 0
        gen = {
            "provenance": [1] * k + [0] * (10 - k),
            "steps": {"seconds": [seconds_per_token] * 10, "large_called": [False] * 10},
            "forwards": {},
        }
        rec = {"example_id": f"ex{i}", "scores": {"acc": s}, "generation": gen, "error": ""}
        lines.append(json.dumps(rec))
    for i in range(failed):
        lines.append(json.dumps({"example_id": f"bad{i}", "scores": {}, "error": "boom"}))
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    return folder


GOOD = [1.0] * 16 + [0.0] * 4


def test_same_run_flags_nothing(tmp_path):
    old = write_run(tmp_path / "old", GOOD)
    new = write_run(tmp_path / "new", GOOD)
    assert main(["compare", str(old), str(new)]) == 0


@pytest.mark.parametrize(
    "new_machine, noted",
    [({"cpus": 2, "cpu": "X"}, False),  # a newer manifest records more: the same machine
     ({"cpus": 16, "cpu": "X"}, True)],
)  # fmt: skip
def test_a_different_machine_is_noted(tmp_path, capsys, new_machine, noted):
    old = write_run(tmp_path / "old", GOOD, manifest={"machine": {"cpus": 2}})
    new = write_run(tmp_path / "new", GOOD, manifest={"machine": new_machine})
    assert main(["compare", str(old), str(new)]) == 0
    assert ("note: different machines" in capsys.readouterr().out) == noted


def test_a_clear_quality_drop_is_flagged(tmp_path, capsys):
    old = write_run(tmp_path / "old", GOOD)
    new = write_run(tmp_path / "new", [0.0] * 8 + GOOD[8:])  # 8 of 16 correct answers lost
    assert main(["compare", str(old), str(new), "--json", str(tmp_path / "v.json")]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION quality: acc dropped 0.8 -> 0.4" in out
    v = json.loads((tmp_path / "v.json").read_text())
    assert v["n_paired"] == 20 and v["diff_ci"][1] < 0
    # the exact McNemar test on the 0 vs 8 discordant pairs: p = 2 / 2**8, by hand
    assert v["discordant"] == [0, 8] and v["p"] == pytest.approx(2 / 2**8)
    assert v["test"] == "exact McNemar" and v["verdict"] == "worse" and v["n_boot"] == 10_000
    assert "exact McNemar p = 0.007812 (discordant: 0 right in new only, 8 in old only)" in out


def test_a_drop_the_interval_excludes_but_the_exact_test_does_not_is_not_flagged(tmp_path):
    """5 of 40 correct answers lost and none won: the bootstrap interval lies below 0 but the
    exact test's p is 2 / 2**5 = 0.0625, so the verdict is no difference and nothing is flagged."""
    old = write_run(tmp_path / "old", [1.0] * 40)
    new = write_run(tmp_path / "new", [0.0] * 5 + [1.0] * 35)
    v = compare(RunFolder(old).read(), RunFolder(new).read())
    assert v.diff_ci[1] < 0 and v.p == pytest.approx(2 / 2**5)
    assert v.verdict == "no difference" and v.flags == ()


def test_a_drop_inside_the_noise_is_not_flagged(tmp_path):
    old = write_run(tmp_path / "old", GOOD)
    new = write_run(tmp_path / "new", [0.0] + GOOD[1:16] + [1.0] + GOOD[17:])  # one lost, one won
    v = compare(RunFolder(old).read(), RunFolder(new).read())
    assert v.flags == () and v.diff_ci[0] < 0 < v.diff_ci[1]
    one_lost = write_run(tmp_path / "one", [0.0] + GOOD[1:])
    assert compare(RunFolder(old).read(), RunFolder(one_lost).read()).flags == ()  # CI reaches 0


def test_a_longer_run_is_paired_on_the_examples_both_scored(tmp_path, capsys):
    """Old scored 30 examples, new its first 20: each run's quality is its own, the paired values
    (and the difference) are on the 20 both scored, printed when they differ."""
    old = write_run(tmp_path / "old", GOOD + [0.0] * 10)  # 0.533 over 30, 0.8 on the first 20
    new = write_run(tmp_path / "new", [0.0] * 2 + GOOD[2:])  # 0.7
    assert main(["compare", str(old), str(new), "--json", str(tmp_path / "v.json")]) == 0
    v = json.loads((tmp_path / "v.json").read_text())
    assert v["quality_old"] == pytest.approx(16 / 30) and v["n_paired"] == 20
    assert (v["paired_old"], v["paired_new"]) == pytest.approx((0.8, 0.7))
    assert v["diff"] == pytest.approx(v["paired_new"] - v["paired_old"])
    assert "on those 20: 0.8 -> 0.7" in capsys.readouterr().out


def test_the_shares_of_a_longer_run_are_its_shares_on_the_paired_examples(tmp_path):
    """Old's first 20 examples take 2 of 10 tokens from large and its last 10 take 8 (0.4 over
    its 30); new takes 3 of 10 on its 20: the pair is measured at shares 0.2 and 0.3."""
    old = write_run(tmp_path / "old", GOOD + [0.0] * 10, large=[2] * 20 + [8] * 10)
    new = write_run(tmp_path / "new", GOOD, large=[3] * 20)
    v = compare(RunFolder(old).read(), RunFolder(new).read())
    assert (v.paired_share_old, v.paired_share_new) == pytest.approx((0.2, 0.3))
    assert "at large-token share 0.200 -> 0.300" in report(
        RunFolder(old).read(), RunFolder(new).read(), v
    )


def test_unpaired_runs_use_old_interval(tmp_path):
    old = RunFolder(write_run(tmp_path / "old", GOOD)).read()
    new = RunFolder(write_run(tmp_path / "new", [0.0] * 20)).read()
    new = new.__class__(
        new.path, new.manifest, [dict(r, example_id="x" + r["example_id"]) for r in new.records], 0
    )
    v = compare(old, new)
    assert v.n_paired == 0 and v.flags and "below old's 95% CI" in v.flags[0]


@pytest.mark.parametrize("factor,flagged", [(1.1, False), (1.5, True)])
def test_speed_drop_beyond_the_ratio_is_flagged(tmp_path, factor, flagged):
    old = write_run(tmp_path / "old", GOOD, seconds_per_token=0.01)
    new = write_run(tmp_path / "new", GOOD, seconds_per_token=0.01 * factor)
    v = compare(RunFolder(old).read(), RunFolder(new).read(), max_slowdown=1.25)
    assert v.slowdown == pytest.approx(factor)
    assert bool(v.flags) is flagged and (not flagged or v.flags[0].startswith("speed:"))


def test_new_failures_are_flagged(tmp_path):
    old = write_run(tmp_path / "old", GOOD)
    new = write_run(tmp_path / "new", GOOD, failed=2)
    v = compare(RunFolder(old).read(), RunFolder(new).read())
    assert v.failed_new == 2 and v.flags == ("failures: 0 -> 2 failed examples",)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["compare", "/no/such/run", "/no/such/run"], "is not a run folder"),
        (["compare", "OLD", "OTHER"], "runs differ in task"),
        (["compare", "OLD", "OLD", "--max-slowdown", "0"], "--max-slowdown must be > 0"),
    ],
)
def test_user_errors(tmp_path, capsys, argv, message):
    write_run(tmp_path / "OLD", GOOD)
    write_run(tmp_path / "OTHER", GOOD, manifest={"task": "u"})
    argv = [str(tmp_path / a) if a in ("OLD", "OTHER") else a for a in argv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


class _MatchLarge:
    """A toy task: an answer scores 1 when it is large's greedy completion of the prompt."""

    name, metric = "match_large", "match"

    def __init__(self, references):
        self.references = references

    def score(self, example, completion):
        return {"match": float(completion == self.references[example.id])}


def test_degraded_router_is_flagged_on_tiny_runs(tmp_path, capsys):
    """Real runner output on tiny models: oracle (= large's greedy output) vs random p=0.5."""
    from harness.backends.engine import Engine
    from harness.core.loop import DecodeConfig
    from harness.evaluation.runner import decode_examples, write_summary
    from routers import get_router
    from tasks.base import Example, user_message
    from tests.tiny import tiny_backends, tiny_tokenizer

    engine = Engine(tiny_tokenizer(), tiny_backends())
    cfg = DecodeConfig(max_new_tokens=8)
    examples = [Example(f"q{i}", user_message(p), None) for i, p in enumerate("abcdefgh")]
    refs = {
        ex.id: engine.generate(get_router("large"), engine.encode(ex.messages), cfg).text
        for ex in examples
    }
    task = _MatchLarge(refs)
    folders = {}
    for name, args in (("oracle", {}), ("random", {"p": 0.5})):
        out = tmp_path / name
        out.mkdir()
        manifest = {"task": task.name, "split": "test", "metric": "match", "router": name}
        (out / "manifest.json").write_text(json.dumps({**manifest, "router_args": args}))
        router, done = get_router(name, args), {}
        folder = RunFolder(out)
        decode_examples(engine, router, task, examples, cfg, folder, "test", done)
        write_summary(folder, list(done.values()), manifest)
        folders[name] = str(out)
    # timings on a shared CPU are noise: only quality is judged here
    assert main(["compare", folders["oracle"], folders["oracle"], "--max-slowdown", "100"]) == 0
    assert main(["compare", folders["oracle"], folders["random"], "--max-slowdown", "100"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION quality: match dropped 1 ->" in out
