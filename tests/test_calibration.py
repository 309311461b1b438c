"""Calibrated thresholds for the untrained token routers (`hybridbench calibrate`), on the tiny pair:
which tail each router defers, that the calib scores are what the router reads while small writes,
and the sweep's target-share settings."""

from __future__ import annotations

import json

import pytest

from harness.backends.engine import Engine
from harness.cli.main import main
from harness.core.loop import DecodeConfig
from harness.core.router import Decision, Needs, Router
from harness.core.scheduler import generate
from harness.errors import UserError
from routers import get_router, router_class
from routers.baselines import entropy, top_probability
from routers.calibration import threshold_for
from tasks import get_task
from tests.tiny import save_tiny_pair


def test_each_router_defers_its_own_tail():
    scores = [float(x) for x in range(1, 11)]
    for share in (0.1, 0.3, 0.5):
        below = threshold_for("confidence", scores, share)
        above = threshold_for("entropy", scores, share)
        assert sum(s < below for s in scores) == round(10 * share)
        assert sum(s > above for s in scores) == round(10 * share)
    assert threshold_for("entropy", scores, 0.0) == float("inf")  # defers nothing
    assert threshold_for("reward", scores, 0.0) == float("-inf")
    with pytest.raises(UserError, match="target_share"):
        threshold_for("entropy", scores, 1.5)


class Reader(Router):
    """Keeps every token; records what the entropy and confidence routers would read."""

    def __init__(self):
        self.seen = {"entropy": [], "confidence": []}

    def needs(self):
        return Needs(draft_len=1)

    def decide(self, view):
        self.seen["entropy"] += entropy(view.small_logits).tolist()
        self.seen["confidence"] += top_probability(view.small_logits).tolist()
        return Decision(keep=1, defer=False)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    small, large = save_tiny_pair(tmp_path_factory.mktemp("models"))
    return ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]


def test_calibrate_scores_what_the_router_reads_and_sets_its_threshold(pair, tmp_path):
    task = get_task("gsm8k")
    examples = task.split("calib")[:2]
    engine = Engine.load(pair[1], pair[3], dtype="float32")  # what the command loads
    cfg = DecodeConfig(max_new_tokens=8, stop=tuple(task.stop), eos_ids=engine.eos_ids)
    for name in ("entropy", "confidence"):
        out = tmp_path / f"{name}.json"
        argv = ["calibrate", "--router", name, "--task", "gsm8k", "--limit", "2"]
        assert main([*argv, "--max-new-tokens", "8", "--out", str(out), *pair]) == 0
        cal = json.loads(out.read_text())
        want = []
        for ex in examples:
            reader = Reader()
            generate(engine.backends, reader, engine.encode(ex.messages), cfg)
            want += reader.seen[name]
        assert cal["router"] == name and cal["example_ids"] == [e.id for e in examples]
        assert cal["scores"] == pytest.approx(want, abs=1e-4)
        router = get_router(name, {"target_share": 0.3, "calibration": str(out)})
        assert router.threshold == pytest.approx(threshold_for(name, cal["scores"], 0.3))
        assert router.used_example_ids() == set(cal["example_ids"])
        assert router.describe()["target_share"] == 0.3
    # the other router's file, or both knobs at once, are refused with a clear message
    with pytest.raises(UserError, match="calibrates router 'confidence'"):
        get_router("entropy", {"target_share": 0.3, "calibration": str(out)})
    with pytest.raises(UserError, match="not both"):
        get_router("confidence", {"target_share": 0.3, "threshold": 0.5, "calibration": str(out)})
    with pytest.raises(UserError, match="calibration=FILE"):
        get_router("entropy", {"target_share": 0.3})
    assert get_router("entropy", {}).threshold == 1.0  # the old default still holds


def test_calibrate_reads_small_answers_from_records(pair, tmp_path):
    """--records: the answers of a small-only run over the split give the same scores."""
    run = ["run", "--task", "gsm8k", "--router", "small", "--split", "calib", "--limit", "2"]
    assert main([*run, "--max-new-tokens", "8", "--out", str(tmp_path / "r"), *pair]) == 0
    base = ["calibrate", "--router", "entropy", "--task", "gsm8k", "--limit", "2"]
    base += ["--max-new-tokens", "8", *pair]
    assert main([*base, "--out", str(tmp_path / "a.json")]) == 0
    recs = str(tmp_path / "r" / "records.jsonl")
    assert main([*base, "--records", recs, "--out", str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["scores"] == pytest.approx(b["scores"], abs=1e-5) and b["answers_from"] == recs
    assert main([*base, "--limit", "3", "--records", recs, "--out", str(tmp_path / "c.json")]) == 2


def test_sweep_uses_target_shares_when_given_a_calibration():
    from harness.evaluation import sweep

    grid = [{"threshold": t} for t in router_class("confidence").SWEEP_THRESHOLDS]
    assert sweep.router_settings("confidence", [0.1, 0.2]) == grid
    fixed = {"calibration": "cal.json"}
    assert sweep.router_settings("entropy", [0.1, 0.35], fixed) == [
        {"target_share": 0.1}, {"target_share": 0.35},
    ]  # fmt: skip
