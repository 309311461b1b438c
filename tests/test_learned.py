"""The `learned` token router and `train-learned`, on the tiny pair and synthetic labels."""

from __future__ import annotations

import json

import pytest
import torch

from harness.backends.engine import Engine
from harness.core.loop import DecodeConfig
from harness.core.router import Decision, Needs, Router
from harness.core.scheduler import generate
from harness.errors import UserError
from harness.training import learned as tl
from routers import get_router
from routers.baselines import entropy, top_probability
from routers.learned import FEATURES, LearnedRouter, distribution_features
from tests.tiny import BACKENDS, save_tiny_pair, tiny_backends, tiny_tokenizer
from tests.trained_router import assert_thresholds_at_the_ends


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """train-learned on the tiny pair (label_free labels of 6 gsm8k train examples, made here):
    (output folder, model options)."""
    from harness.cli.main import main

    root = tmp_path_factory.mktemp("learned")
    small, large = save_tiny_pair(root / "m")
    models = ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]
    out = root / "out"
    args = ["train-learned", "--task", "gsm8k", "--train-limit", "6", "--max-new-tokens", "24"]
    args += ["--epochs", "3", "--bootstrap", "50", "--out", str(out)]
    assert main(args + models) == 0
    # its threshold, calibrated as any score router's along small's own calib answers
    cal = ["calibrate", "--router", "learned", "--checkpoint", str(out / "learned.pt")]
    cal += ["--task", "gsm8k", "--limit", "2", "--max-new-tokens", "24"]
    assert main([*cal, "--out", str(out / "calibration-gsm8k.json"), *models]) == 0
    return out, models, args


class Recorder(Router):
    """Keeps every drafted token; records what the core shows a router at each step."""

    def __init__(self):
        self.views = []

    def needs(self):
        return Needs(draft_len=1, small_hidden=True)

    def decide(self, view):
        self.views.append(view)
        return Decision(keep=1, defer=False)


def test_features_are_what_entropy_and_confidence_read():
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(7, 50, generator=g)
    draft = torch.tensor([0, 1, 2, 3, 4, 5, 6])
    f = distribution_features(logits, draft)
    assert f.shape == (7, len(FEATURES)) and torch.isfinite(f).all()
    assert torch.equal(f[:, FEATURES.index("entropy")], entropy(logits))
    assert torch.equal(f[:, FEATURES.index("top1_prob")], top_probability(logits))
    p = torch.softmax(logits, -1)
    top2 = p.topk(2, -1).values
    torch.testing.assert_close(f[:, FEATURES.index("margin")], top2[:, 0] - top2[:, 1])
    logp = torch.log_softmax(logits, -1)
    torch.testing.assert_close(
        f[1:, FEATURES.index("draft_logprob")], logp[1:].gather(-1, draft[1:, None])[:, 0]
    )
    torch.testing.assert_close(f[:, FEATURES.index("top1_logprob")], logp.max(-1).values)
    logits[0, 5:] = -torch.inf  # masked tokens: the features stay finite, entropy the same
    masked = distribution_features(logits, draft)
    assert torch.isfinite(masked).all()
    torch.testing.assert_close(masked[0, 0], entropy(logits[0, :5][None])[0])


@pytest.mark.parametrize("kind", BACKENDS)
def test_training_features_are_what_the_router_sees_when_decoding(kind):
    """Teacher forcing small over its own greedy answer gives, per token, the features and
    hidden state the core shows the router at that step (training reads what running reads)."""
    engine = Engine(tiny_tokenizer(), tiny_backends(kind=kind))
    prompt = engine.encode("what is 2+3?")
    rec = Recorder()
    g = generate(engine.backends, rec, prompt, DecodeConfig(max_new_tokens=10))
    traj = list(g.token_ids)
    dist, hid, top = tl.forced_features(engine.backends["small"], prompt, traj, traj, chunk=4)
    assert top.tolist() == traj
    seen = torch.cat([distribution_features(v.small_logits, v.draft) for v in rec.views])
    torch.testing.assert_close(dist, seen, atol=1e-4, rtol=1e-4)
    # kept in bf16 (8 bits of mantissa); the two passes' float32 states differ in the last bits
    seen_hidden = torch.cat([v.small_hidden for v in rec.views])
    torch.testing.assert_close(hid.float(), seen_hidden, rtol=2**-7, atol=1e-3)


def synthetic(n_examples=60, per=20, hidden=16, seed=0):
    """Feature columns whose label is set by a hidden-state direction and by the drafted token's
    parity, not by small's distribution: entropy and confidence cannot separate them."""
    g = torch.Generator().manual_seed(seed)
    n = n_examples * per
    h = torch.randn(n, hidden, generator=g)
    draft = torch.randint(0, 1000, (n,), generator=g)
    logits = 2 * torch.randn(n, 40, generator=g)
    label = ((h[:, 0] + 2.0 * (draft % 2 == 0).float() - 1.0) > 0).to(torch.int8)
    return {
        "example": torch.arange(n_examples).repeat_interleave(per).int(),
        "draft": draft,
        "dist": distribution_features(logits, draft % 40),
        "hidden": h.to(torch.bfloat16),
        "label": label,
        "oracle": label,
        "match": torch.ones(n, dtype=torch.bool),
    }


def test_training_on_synthetic_labels_separates_them():
    cols = synthetic()
    fit = tl.FitConfig(epochs=15, batch_size=64, buckets=64, width=32, patience=5)
    rows, y = tl.target_rows(cols, "oracle")
    groups = cols["example"][rows]
    part = tl.example_parts(groups, fit)
    assert set(part.tolist()) == {0, 1, 2}
    for e in torch.unique(groups):  # whole examples go to one part
        assert len(torch.unique(part[groups == e])) == 1
    net, stats = tl.fit_net(cols, rows, y, part, fit, progress=False)
    held = rows[part == 2]
    scores = {"learned": tl.predict(net, cols, held), **tl.baseline_scores(cols, held)}
    rep = tl.compare_scores(scores, y[part == 2], groups[part == 2], reps=200)
    a = rep["auc"]
    assert a["learned"]["value"] > 0.9 and abs(a["entropy"]["value"] - 0.5) < 0.15
    lo, hi = rep["auc_difference"]["learned-entropy"]["ci95"]
    assert 0.2 < lo <= rep["auc_difference"]["learned-entropy"]["value"] <= hi
    assert a["learned"]["ci95"][0] <= a["learned"]["value"] <= a["learned"]["ci95"][1]
    r = rep["recall_at_share"]["0.35"]
    assert r["learned"] > r["entropy"] + 0.2
    # the tokens only the router defers need large more often than those only entropy defers
    d = rep["disagreements"]["0.35"]["entropy"]
    assert d["only_first"]["rows"] == d["only_other"]["rows"] > 0
    assert d["only_first"]["large_needed"] > d["only_other"]["large_needed"]
    # the distribution alone cannot do it: an ablation reading only small's distribution
    dist_only = tl.FitConfig(**{**fit.__dict__, "inputs": ("dist",)})
    net2, _ = tl.fit_net(cols, rows, y, part, dist_only, progress=False)
    assert tl.compare_scores({"d": tl.predict(net2, cols, held)}, y[part == 2], groups[part == 2],
                             reps=10)["auc"]["d"]["value"] < 0.7  # fmt: skip


def test_recall_and_disagreements_count_the_lowest_scored():
    y = torch.tensor([0.0, 1, 0, 1, 1])
    s = torch.tensor([0.1, 0.2, 0.9, 0.8, 0.7])
    assert tl.recall_at_share(s, y, 0.2) == 0.5  # the lowest (0.1) is one of the two zeros
    assert tl.recall_at_share(s, y, 1.0) == 1.0
    other = torch.tensor([0.5, 0.1, 0.9, 0.8, 0.2])  # defers rows 1 and 4 at 40%, s rows 0, 1
    d = tl.disagreements(s, other, y, 0.4)
    assert d == {"only_first": {"rows": 1, "large_needed": 1.0},
                 "only_other": {"rows": 1, "large_needed": 0.0}, "both": 1}  # fmt: skip


@pytest.mark.parametrize("kind", BACKENDS)
def test_thresholds_at_the_ends_equal_small_only_and_large_only(trained, kind):
    out, _, _ = trained
    assert_thresholds_at_the_ends("learned", str(out / "learned.pt"), kind)


def test_calibration_hits_the_target_share_on_calib(trained):
    """`hybridbench calibrate --router learned` holds the router's scores along small's calib
    answers; at target_share S the router defers S of those tokens (within one token), read
    as the core shows them to it when small writes them."""
    from harness.training.calibrate import forced_views
    from tasks import get_task

    out, models, _ = trained
    cal_path = out / "calibration-gsm8k.json"
    cal = json.loads(cal_path.read_text())
    assert cal["router"] == "learned" and cal["split"] == "calib" and len(cal["example_ids"]) == 2
    engine = Engine.load(models[1], models[3], dtype="float32")  # the pair calibrate loaded
    calib = {ex.id: ex for ex in get_task("gsm8k").split("calib")[:2]}
    cfg = DecodeConfig(max_new_tokens=24, eos_ids=engine.eos_ids)
    answers = {}
    for ex_id in cal["example_ids"]:
        prompt = engine.encode(calib[ex_id].messages)
        answers[ex_id] = (
            prompt,
            list(generate(engine.backends, get_router("small"), prompt, cfg).token_ids),
        )
    for share in (0.2, 0.5):
        args = {
            "path": str(out / "learned.pt"),
            "target_share": share,
            "calibration": str(cal_path),
        }
        router = get_router("learned", args)
        assert set(cal["example_ids"]) <= router.used_example_ids()
        deferred = n = 0
        for prompt, ids in answers.values():
            for view in forced_views(engine, router.needs(), prompt, ids):
                deferred += int(router.defer_mask(view).sum())
                n += len(view.draft)
        assert n == cal["n_tokens"]
        assert abs(deferred / n - share) <= 1 / n + 1e-9


def test_router_goes_through_run_and_sweep(trained, tmp_path):
    from harness.cli.main import main

    out, models, _ = trained
    path, cal = f"path={out}/learned.pt", f"calibration={out}/calibration-gsm8k.json"
    run = ["run", "--task", "gsm8k", "--router", "learned", "--router-arg", path]
    run += ["--router-arg", "target_share=0.3", "--router-arg", cal]
    run += ["--limit", "1", "--max-new-tokens", "6", *models]
    assert main([*run, "--split", "train", "--out", str(tmp_path / "r0")]) == 2  # trained on it
    assert main([*run, "--split", "test", "--out", str(tmp_path / "r1")]) == 0
    manifest = json.loads((tmp_path / "r1" / "manifest.json").read_text())
    assert manifest["router"] == "learned" and manifest["router_trained_on"] == ["gsm8k"]
    sweep = ["sweep", "--task", "gsm8k", "--routers", "learned,entropy", "--targets", "0.1,0.35"]
    sweep += ["--router-arg", f"learned:{path}", "--router-arg", f"learned:{cal}"]
    sweep += ["--limit", "1", "--max-new-tokens", "6", "--out", str(tmp_path / "s"), *models]
    assert main(sweep) == 0
    for t in ("0.1", "0.35"):
        summary = json.loads(
            (tmp_path / "s" / f"learned__target_share={t}" / "summary.json").read_text()
        )
        assert summary["n"] == 1


def test_metrics_resume_and_an_existing_label_file(trained, tmp_path, monkeypatch):
    from harness.cli.main import main

    out, models, args = trained
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["auc"]) == {"learned", "entropy", "confidence"}
    assert set(m["auc_difference"]) == {"learned-entropy", "learned-confidence"}
    assert m["argmax_match"] == 1.0 and m["target"] == "oracle"
    ckpt = torch.load(out / "learned.pt", weights_only=True)
    from tasks import get_task

    train = [ex.id for ex in get_task("gsm8k").split("train")[:6]]
    assert sorted(ckpt["train_ids"]) == sorted(train)
    # a rerun finds every step done: no labels, features or training again
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()}
    from harness.training import labels

    monkeypatch.setattr(labels, "plan_example", lambda *a, **k: pytest.fail("relabelled"))
    for name in ("_features_of", "fit_net"):
        monkeypatch.setattr(tl, name, lambda *a, **k: pytest.fail("redone"))
    assert main(args + models) == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()} == before
    assert main([*args[:-1], str(out), "--epochs", "4", *models]) == 2  # other settings: refused
    monkeypatch.undo()
    # the label file made there, read with --labels, trained on its own labels and on the
    # distribution alone, sharing the first training's features (nothing made again)
    monkeypatch.setattr(tl, "_features_of", lambda *a, **k: pytest.fail("features made again"))
    other = tmp_path / "lab"
    again = ["train-learned", "--task", "gsm8k", "--labels", str(out / "labels.safetensors")]
    again += ["--target", "citer", "--inputs", "dist", "--features", str(out / "features")]
    again += ["--epochs", "2", "--bootstrap", "20", "--out", str(other), *models]
    assert main(again) == 0
    assert json.loads((other / "metrics.json").read_text())["inputs"] == ["dist"]
    router = get_router("learned", {"path": str(other / "learned.pt")})
    assert router.needs().small_hidden is False  # reads small's distribution alone
    wrong = ["mbpp" if a == "gsm8k" else a for a in again]
    assert main(wrong) == 2  # gsm8k's labels for mbpp: refused


def test_bad_checkpoints_are_one_user_error(trained, tmp_path):
    out, _, _ = trained
    ckpt = torch.load(out / "learned.pt", weights_only=True)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    torch.save({**ckpt, "kind": "citer"}, tmp_path / "citer.pt")
    torch.save({k: v for k, v in ckpt.items() if k != "state_dict"}, tmp_path / "cut.pt")
    bad_weights = {**ckpt, "state_dict": {k: v[:1] for k, v in ckpt["state_dict"].items()}}
    torch.save(bad_weights, tmp_path / "shape.pt")
    cases = {"nope.pt": "not found", "junk.pt": "not a learned router checkpoint",
             "citer.pt": "not 'learned'", "cut.pt": "damaged",
             "shape.pt": "do not fit"}  # fmt: skip
    for name, msg in cases.items():
        with pytest.raises(UserError, match=msg):
            LearnedRouter(str(tmp_path / name))
    with pytest.raises(UserError, match="another checkpoint"):
        torch.save({**ckpt, "threshold": 0.1}, tmp_path / "other.pt")
        LearnedRouter(str(tmp_path / "other.pt"), target_share=0.2,
                      calibration=str(out / "calibration-gsm8k.json"))  # fmt: skip
    with pytest.raises(UserError, match="not both"):
        LearnedRouter(str(out / "learned.pt"), threshold=0.5, target_share=0.2,
                      calibration=str(out / "calibration-gsm8k.json"))  # fmt: skip


def test_overhead_times_the_same_tokens(trained):
    out, _, _ = trained
    engine = Engine(tiny_tokenizer(), tiny_backends(kind="hf"))
    router = LearnedRouter(str(out / "learned.pt"))
    rep = tl.overhead(engine, router, [engine.encode("hi"), engine.encode("2+2?")], 8, rounds=1)
    assert rep["same_tokens"] and rep["tokens"] > 0 and rep["ratio_to_small"]["small"] == 1.0
    assert set(rep["ms_per_token"]) == {"small", "entropy", "learned"}
