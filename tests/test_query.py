"""Query-level routers and `train-query` on tiny random models."""

from __future__ import annotations

import math

import pytest
import torch

from harness.backends.engine import Engine
from harness.core.loop import DecodeConfig
from harness.core.router import Needs, QueryView, Router
from harness.core.scheduler import generate
from harness.training.query import features, fit_logistic
from routers import get_router
from routers.calibration import calibrated_threshold
from routers.query import QueryClassifier
from tests.tiny import BACKENDS, tiny_backends, tiny_tokenizer


@pytest.fixture(scope="module", params=BACKENDS)
def engine(request):
    return Engine(tiny_tokenizer(), tiny_backends(kind=request.param))


def test_share_of_calib_scores_is_a_quantile_of_a_tensor():
    s = torch.tensor([0.4, 0.1, 0.3, 0.2])  # the query and CITER routers keep tensors
    assert calibrated_threshold(s, 0.5) == pytest.approx(0.25)
    assert (s < calibrated_threshold(s, 0.25)).sum() == 1
    assert (s < calibrated_threshold(s, 0.0)).sum() == 0
    assert (s < calibrated_threshold(s, 1.0)).sum() == 4


def test_logistic_regression_learns_and_cross_validates():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(80, 8, generator=g) * 5 + 3  # standardization matters
    y = (x[:, 0] - 3 > 0).float()
    clf, stats = fit_logistic(x, y)
    with torch.no_grad():
        acc = float(((clf(x) > 0).float() == y).float().mean())
    assert acc > 0.9 and stats["cv_log_loss"] < stats["prior_log_loss"]
    assert stats["cv_auc"] > 0.9  # out-of-fold scores rank the classes apart


def test_auc_counts_pairs_ranked_right_ties_half():
    from harness.training.common import auc

    g = torch.Generator().manual_seed(1)
    s = torch.randint(0, 6, (200,), generator=g).float()  # many ties
    y = (torch.rand(200, generator=g) < 0.3 + 0.08 * s).float()
    pos, neg = s[y == 1], s[y == 0]
    pairs = (pos[:, None] > neg[None, :]).double() + 0.5 * (pos[:, None] == neg[None, :]).double()
    assert auc(s, y) == pytest.approx(float(pairs.mean()), abs=1e-12)
    assert auc([1.0, 2.0, 3.0], [0, 0, 1]) == 1.0 and auc([3.0, 1.0], [0, 1]) == 0.0
    assert auc([1.0, 1.0], [0, 1]) == 0.5 and math.isnan(auc([1.0, 2.0], [1, 1]))


def save_query(path, bias: float, hidden=48, calib=(0.1, 0.2, 0.3, 0.4, 0.5), share=0.4):
    clf = QueryClassifier(hidden)
    with torch.no_grad():
        clf.linear.weight.zero_()
        clf.linear.bias.fill_(bias)
    torch.save(
        {
            "kind": "query",
            "hidden_size": hidden,
            "state_dict": clf.state_dict(),
            "threshold": calibrated_threshold(torch.tensor(calib), share),
            "share": share,
            "calib_scores": list(calib),
            "train_ids": ["t/1"],
            "calib_ids": ["c/1"],
        },
        path,
    )
    return str(path)


def test_query_router_sends_the_whole_answer_one_way(engine, tmp_path):
    path = save_query(tmp_path / "q.pt", bias=0.0)  # P(small correct) = 0.5 for every prompt
    prompt = engine.encode("what is 2+2?")
    cfg = DecodeConfig(max_new_tokens=10)
    small = generate(engine.backends, get_router("small"), prompt, cfg)
    large = generate(engine.backends, get_router("large"), prompt, cfg)
    r = get_router("query", {"path": path})  # tau = 0.35 from calib (share 0.4): 0.5 stays
    g = generate(engine.backends, r, prompt, cfg)
    assert g.query_route == "small" and g.token_ids == small.token_ids
    assert set(g.provenance) == {0} and not any(s.large_called for s in g.steps)
    r = get_router("query", {"path": path, "share": 1.0})  # every calib prompt below tau
    g = generate(engine.backends, r, prompt, cfg)
    assert g.query_route == "large" and g.token_ids == large.token_ids
    assert set(g.provenance) == {1}
    assert r.used_example_ids() == {"t/1", "c/1"} and r.threshold > 0.5


def test_features_are_what_the_core_shows_a_query_router(engine):
    seen = []

    class Spy(Router):
        def needs(self):
            return Needs(query=True)

        def route_query(self, view: QueryView) -> bool:
            seen.append(view.prompt_hidden)
            return False

    from tasks.base import Example, user_message

    ex = Example("x/0", user_message("count to three"), "3")
    generate(engine.backends, Spy(), engine.encode(ex.messages), DecodeConfig(max_new_tokens=1))
    torch.testing.assert_close(features(engine, [ex])[0], seen[0])


def test_random_query_share_and_reproducibility(engine):
    r = get_router("random_query", {"p": 0.3})
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731 - what the core does per prompt
    prompts = [torch.tensor([1, 2, i, i * 7 % 50]) for i in range(400)]
    routes = [r.route_query(QueryView(p, torch.zeros(4), gen())) for p in prompts]
    assert 0.25 < sum(routes) / len(routes) < 0.35  # binomial sd 0.023 around 0.3
    again = [r.route_query(QueryView(p, torch.zeros(4), gen())) for p in prompts]
    assert routes == again
    other = [
        r.route_query(QueryView(p, torch.zeros(4), torch.Generator().manual_seed(1)))
        for p in prompts
    ]
    assert routes != other


def test_train_query_cli_end_to_end(tmp_path):
    """train-query on the tiny pair and gsm8k (labels by decoding), then the runner refuses
    the calib split and runs on test."""
    from harness.cli.main import main
    from tests.tiny import save_tiny_pair

    small, large = save_tiny_pair(tmp_path / "m")
    models = ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]
    out = tmp_path / "q"
    args = ["train-query", "--task", "gsm8k", "--train-limit", "6", "--calib-limit", "4"]
    assert main([*args, "--max-new-tokens", "4", "--share", "0.5", "--out", str(out), *models]) == 0
    ckpt = torch.load(out / "query.pt", weights_only=True)
    scores = torch.tensor(ckpt["calib_scores"])
    assert len(scores) == 4 and int((scores < ckpt["threshold"]).sum()) == 2
    assert "cv_auc" in ckpt["stats"] and "calib" not in ckpt["stats"]
    # labels from small-only runs' records, train and calib: the held-out figures on calib
    recs = {}
    for split in ("train", "calib"):
        recs[split] = tmp_path / f"{split}-small"
        r = ["run", "--task", "gsm8k", "--router", "small", "--split", split, "--limit", "6"]
        assert main([*r, "--max-new-tokens", "4", "--out", str(recs[split]), *models]) == 0
    with_calib = ["--small-records", f"{recs['train']}/records.jsonl"]
    with_calib += ["--calib-records", f"{recs['calib']}/records.jsonl"]
    assert main([*args, *with_calib, "--out", str(tmp_path / "q2"), *models]) == 0
    held = torch.load(tmp_path / "q2" / "query.pt", weights_only=True)["stats"]["calib"]
    assert held["n"] == 4 and set(held) >= {"auc", "log_loss", "prior_log_loss", "small_correct"}
    bad = ["--small-records", f"{recs['train']}/records.jsonl"]
    bad += ["--calib-records", f"{recs['train']}/records.jsonl"]  # train's records: no calib ids
    assert main([*args, *bad, "--out", str(tmp_path / "q3"), *models]) == 2
    run = ["run", "--task", "gsm8k", "--router", "query", "--router-arg", f"path={out}/query.pt"]
    run += ["--limit", "2", "--max-new-tokens", "3", *models]
    assert main([*run, "--split", "calib", "--out", str(tmp_path / "r1")]) == 2
    assert main([*run, "--split", "test", "--out", str(tmp_path / "r2")]) == 0


def test_trained_routers_say_what_they_learned_from_and_runs_mark_transfer(tmp_path):
    """A learned router lists the tasks of the ids it was trained/calibrated on; a run of it on
    another task is marked transfer in its manifest and summary, an in-task run is not."""
    import json

    from harness.cli.main import main
    from harness.core.router import tasks_of
    from tests.tiny import save_tiny_pair

    router = get_router("query", {"path": save_query(tmp_path / "q.pt", bias=0.0)})
    assert router.trained_on() == ("c", "t") and get_router("random").trained_on() == ()
    # humaneval's ids keep the dataset's "HumanEval/0": its task is still "humaneval"
    assert tasks_of(["HumanEval/3", "gsm8k/train/1", "mbpp/11"]) == ("gsm8k", "humaneval", "mbpp")
    ckpt = torch.load(tmp_path / "q.pt", weights_only=True)
    ckpt["train_ids"], ckpt["calib_ids"] = ["gsm8k/train/1"], ["gsm8k/calib/1"]
    ckpt["hidden_size"] = 48
    torch.save(ckpt, tmp_path / "g.pt")
    small, large = save_tiny_pair(tmp_path / "pair")
    for task, transfer in (("gsm8k", False), ("arc_challenge", True)):
        out = tmp_path / task
        argv = [
            "run",
            "--task",
            task,
            "--router",
            "query",
            "--router-arg",
            f"path={tmp_path / 'g.pt'}",
        ]
        argv += ["--limit", "2", "--max-new-tokens", "4", "--out", str(out), "--small", small]
        argv += ["--large", large, "--dtype", "float32", "--threads", "1"]
        assert main(argv) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["transfer"] is transfer and summary["router_trained_on"] == "gsm8k"
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["transfer"] is transfer
