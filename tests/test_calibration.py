"""Calibrated thresholds for the untrained token routers (`hybridbench calibrate`), on the tiny pair:
which tail each router defers, that the calib scores are what the router reads while small writes,
and the sweep's target-share settings."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from harness.backends.engine import Engine
from harness.cli.main import main
from harness.core.loop import DecodeConfig
from harness.core.router import Decision, Needs, Router
from harness.core.scheduler import generate
from harness.errors import UserError
from routers import get_router, router_class
from routers.baselines import entropy, top_probability
from routers.calibration import threshold_for
from routers.score import ScoreRouter
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


# --- score routers are generic: any subclass calibrates, with no router names in the code --------


class LargeAgrees(ScoreRouter):
    """A score router that reads large's logits: large's probability of small's drafted token."""

    name = "large_agrees"
    defers_below = True
    default_threshold = 0.5

    def needs(self):
        return Needs(draft_len=self.draft_len, large_logits=True)

    def token_scores(self, view):
        k = len(view.draft)
        return torch.softmax(view.large_logits[:k].float(), -1)[torch.arange(k), view.draft]


class Recorder(Router):
    """Keeps every token small drafts (k at a time) and records LargeAgrees' scores of them,
    checking that large's logits come with the row after the draft (verify's k + 1 rows)."""

    def __init__(self, draft_len: int):
        self.draft_len, self.seen, self.scorer = draft_len, [], LargeAgrees()

    def needs(self):
        return Needs(draft_len=self.draft_len, large_logits=True)

    def decide(self, view):
        assert len(view.large_logits) == len(view.draft) + 1
        self.seen += self.scorer.token_scores(view).tolist()
        return Decision(keep=len(view.draft), defer=False)


def test_any_score_router_calibrates_on_what_it_reads_large_logits_included(pair, tmp_path):
    """A plugin's score router that reads large's logits: `calibrate` builds its views by teacher
    forcing, and its scores are those it reads while small writes (k = 1 and k = 4 a step)."""
    task = get_task("gsm8k")
    examples = task.split("calib")[:2]
    out = tmp_path / "cal.json"
    argv = ["calibrate", "--router", "tests.test_calibration:LargeAgrees", "--task", "gsm8k",
            "--limit", "2", "--max-new-tokens", "70", "--out", str(out), *pair]  # fmt: skip
    assert main(argv) == 0  # 70 tokens: past one teacher-forcing chunk of 64
    cal = json.loads(out.read_text())
    assert cal["router"] == "large_agrees"
    assert cal["router_class"] == "tests.test_calibration:LargeAgrees"
    engine = Engine.load(pair[1], pair[3], dtype="float32")
    cfg = DecodeConfig(max_new_tokens=70, stop=tuple(task.stop), eos_ids=engine.eos_ids)
    for k in (1, 4):
        want = []
        for ex in examples:
            recorder = Recorder(k)
            generate(engine.backends, recorder, engine.encode(ex.messages), cfg)
            want += recorder.seen
        assert cal["scores"] == pytest.approx(want, abs=1e-4)
    router = get_router("tests.test_calibration:LargeAgrees",
                        {"target_share": 0.25, "calibration": str(out)})  # fmt: skip
    assert router.threshold == pytest.approx(threshold_for(LargeAgrees, cal["scores"], 0.25))
    with pytest.raises(UserError, match="calibrates router 'large_agrees', not 'entropy'"):
        get_router("entropy", {"target_share": 0.3, "calibration": str(out)})


def test_a_router_that_scores_nothing_is_refused(pair, tmp_path, capsys):
    argv = ["calibrate", "--router", "random", "--task", "gsm8k", "--out", str(tmp_path / "c.json")]
    assert main([*argv, *pair]) == 2
    assert "not a score router" in capsys.readouterr().err


def test_the_calibration_code_names_no_router():
    """The calibration code reads each router's class (`defers_below`, `token_scores`, `needs`),
    never a list of names: no string constant in it is a built-in router's name (model roles,
    `small`, `large`, `reward`, name models, not routers)."""
    from harness.core.records import MODELS
    from routers import ROUTERS

    root = Path(__file__).resolve().parents[1]
    for path in ("harness/training/calibrate.py", "routers/calibration.py",
                 "harness/cli/calibrate.py"):  # fmt: skip
        tree = ast.parse((root / path).read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef) and n.body
                and isinstance(n.body[0], ast.Expr)}  # fmt: skip
        names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and id(n) not in docs}  # fmt: skip
        assert not names & (set(ROUTERS) - set(MODELS)), (path, names & set(ROUTERS))


PUBLISHED = Path(__file__).resolve().parents[1] / "reports" / "published"


def published_file(used_as: str) -> str:
    """The published copy of a file a published run names (`reports/published/routers`)."""
    files = json.loads((PUBLISHED / "routers" / "files.json").read_text())
    return str(PUBLISHED / "routers" / next(k for k, v in files.items() if v["used_as"] == used_as))


@pytest.mark.parametrize("router", ["entropy", "confidence", "reward", "citer"])
@pytest.mark.parametrize("share", ["0.1", "0.2", "0.35"])
def test_published_calibrations_give_the_published_thresholds(router, share):
    """Every calibration file and run the published edition holds still reads the same: a router
    built from a published run's arguments (its files taken from reports/published/routers)
    describes itself with the run's keys and threshold, so the run folder resumes as it is."""
    run = PUBLISHED / "gsm8k" / f"{router}__target_share={share}"
    args = json.loads((run / "manifest.json").read_text())["router_args"]
    given = {k: v for k, v in args.items() if k not in ("threshold", "checkpoint")}
    given["calibration"] = published_file(args["calibration"])
    if router == "reward":
        given["checkpoint"] = published_file(args["checkpoint"])
    if router == "citer":
        given["path"] = published_file(args["path"])
    described = get_router(router, given).describe()
    assert set(described) == set(args) and described["threshold"] == args["threshold"]
    assert isinstance(router_class(router)(**{**given}), ScoreRouter)
