"""The `r2r` token router and `train-r2r`, on the tiny pair: critical-divergence labels made by
`r2r-labels`, the network trained, calibrated and run through the command line."""

from __future__ import annotations

import json

import pytest
import torch

from harness.backends.engine import Engine
from harness.core.loop import DecodeConfig
from harness.core.scheduler import generate
from harness.errors import UserError
from harness.training import r2r as tr
from harness.training.labels import TokenLabels
from routers import get_router
from routers.r2r import LOGP_FLOOR, TOP_K, R2RRouter, top_logprobs
from tests.tiny import save_tiny_pair
from tests.trained_router import assert_thresholds_at_the_ends

BUDGET = ["--max-new-tokens", "24"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """r2r-labels on 24 gsm8k train examples (every divergence rolled out), train-r2r on their
    critical labels, calibrate on 2 calib examples: (root, model options, train-r2r's args)."""
    from harness.cli.main import main

    root = tmp_path_factory.mktemp("r2r")
    small, large = save_tiny_pair(root / "m")
    models = ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]
    labels = ["r2r-labels", "--task", "gsm8k", "--examples", "24", "--positions", "0", *BUDGET]
    assert main([*labels, "--out", str(root / "labels"), *models]) == 0
    args = ["train-r2r", "--task", "gsm8k", "--labels", str(root / "labels/labels.safetensors")]
    args += ["--epochs", "3", "--bootstrap", "50", "--out", str(root / "out")]
    assert main(args + models) == 0
    cal = ["calibrate", "--router", "r2r", "--checkpoint", str(root / "out/r2r.pt")]
    cal += ["--task", "gsm8k", "--limit", "2", *BUDGET]
    assert main([*cal, "--out", str(root / "out/calibration-gsm8k.json"), *models]) == 0
    return root, models, args


def test_top_logprobs_are_small_s_largest_sorted_and_finite():
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(5, 300, generator=g)
    top = top_logprobs(logits)
    assert top.shape == (5, TOP_K)
    want = torch.log_softmax(logits, -1).sort(-1, descending=True).values[:, :TOP_K]
    torch.testing.assert_close(top, want.clamp(min=LOGP_FLOOR))
    small_vocab = top_logprobs(logits[:, :7])  # fewer tokens than TOP_K: padded at the floor
    assert small_vocab.shape == (5, TOP_K) and (small_vocab[:, 7:] == LOGP_FLOOR).all()
    logits[0, 1:] = -torch.inf
    assert torch.isfinite(top_logprobs(logits)).all()


def test_training_on_synthetic_labels_separates_them():
    """Labels set by a hidden-state direction and the drafted token's parity: the network
    learns them; entropy, reading the distribution alone, cannot."""
    from routers.learned import distribution_features

    g = torch.Generator().manual_seed(0)
    n_ex, per, hidden = 60, 20, 16
    h = torch.randn(n_ex * per, hidden, generator=g)
    draft = torch.randint(0, 1000, (n_ex * per,), generator=g)
    logits = 2 * torch.randn(n_ex * per, 150, generator=g)
    label = ((h[:, 0] + 2.0 * (draft % 2 == 0).float() - 1.0) > 0).to(torch.int8)
    cols = {"example": torch.arange(n_ex).repeat_interleave(per).int(), "draft": draft,
            "top": top_logprobs(logits), "dist": distribution_features(logits, draft % 150),
            "hidden": h.to(torch.bfloat16), "label": label, "oracle": label}  # fmt: skip
    fit = tr.FitConfig(epochs=15, batch_size=64, buckets=64, width=32, patience=5)
    rows, y = tr.target_rows(cols, "critical")
    part = tr.example_parts(cols["example"][rows], fit)
    net, _ = tr.fit_net(cols, rows, y, part, fit, progress=False)
    rep = tr.held_out_report(net, cols, rows, y, part, "critical", 100, 0)
    assert rep["auc"]["r2r"]["value"] > 0.9 and abs(rep["auc"]["entropy"]["value"] - 0.5) < 0.15


def test_thresholds_at_the_ends_equal_small_only_and_large_only(trained):
    root, _, _ = trained
    assert_thresholds_at_the_ends("r2r", str(root / "out/r2r.pt"))


def test_calibration_hits_the_target_share_on_calib(trained):
    """At target_share S the router defers S of small's calib tokens (within one token), the
    tokens read as the core shows them when small writes them."""
    from harness.training.calibrate import forced_views
    from tasks import get_task

    root, models, _ = trained
    cal_path = root / "out/calibration-gsm8k.json"
    cal = json.loads(cal_path.read_text())
    assert cal["router"] == "r2r" and cal["split"] == "calib" and len(cal["example_ids"]) == 2
    engine = Engine.load(models[1], models[3], dtype="float32")
    calib = {ex.id: ex for ex in get_task("gsm8k").split("calib")[:2]}
    cfg = DecodeConfig(max_new_tokens=24, eos_ids=engine.eos_ids)
    answers = []
    for ex_id in cal["example_ids"]:
        prompt = engine.encode(calib[ex_id].messages)
        answers.append((prompt, list(generate(engine.backends, get_router("small"), prompt, cfg).token_ids)))  # fmt: skip
    for share in (0.2, 0.5):
        args = {"path": str(root / "out/r2r.pt"), "target_share": share}
        router = get_router("r2r", args | {"calibration": str(cal_path)})
        assert set(cal["example_ids"]) <= router.used_example_ids()
        deferred = n = 0
        for prompt, ids in answers:
            for view in forced_views(engine, router.needs(), prompt, ids):
                deferred += int(router.defer_mask(view).sum())
                n += len(view.draft)
        assert n == cal["n_tokens"] and abs(deferred / n - share) <= 1 / n + 1e-9


def test_router_runs_through_the_cli_and_refuses_its_training_examples(trained, tmp_path):
    from harness.cli.main import main

    root, models, _ = trained
    path, cal = f"path={root}/out/r2r.pt", f"calibration={root}/out/calibration-gsm8k.json"
    run = ["run", "--task", "gsm8k", "--router", "r2r", "--router-arg", path]
    run += ["--router-arg", "target_share=0.3", "--router-arg", cal]
    run += ["--max-new-tokens", "8", *models]
    from tasks import get_task

    trained_on = set(torch.load(root / "out/r2r.pt", weights_only=True)["train_ids"])
    train = [ex.id for ex in get_task("gsm8k").split("train")]
    first = min(train.index(i) for i in trained_on)  # the train examples up to one it learned
    seen = [*run, "--split", "train", "--limit", str(first + 1), "--out", str(tmp_path / "r0")]
    assert main(seen) == 2
    assert main([*run, "--split", "test", "--limit", "2", "--out", str(tmp_path / "r1")]) == 0
    manifest = json.loads((tmp_path / "r1" / "manifest.json").read_text())
    assert manifest["router"] == "r2r" and manifest["router_trained_on"] == ["gsm8k"]
    summary = json.loads((tmp_path / "r1" / "summary.json").read_text())
    assert summary["n"] == 2


def test_metrics_resume_and_the_ablations(trained, tmp_path, monkeypatch):
    from harness.cli.main import main

    root, models, args = trained
    out, label_file = root / "out", root / "labels/labels.safetensors"
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["auc"]) == {"r2r", "entropy", "confidence"} and m["target"] == "critical"
    assert m["argmax_match"] == 1.0
    held = m["heldout_labels"]  # the held-out examples' labels: what a critical-only oracle defers
    assert held["examples"] == m["examples"] and held["tokens"] >= m["rows"]
    assert held["critical"] == m["large_needed"]  # the held-out rows labelled 0 are the critical
    from harness.training.cost import examples

    lab = json.loads((root / "labels/stats.json").read_text())
    assert (
        examples(root / "labels")
        == f"24 train examples, {lab['rolled_out']} divergences rolled out"
    )
    data = TokenLabels.load(label_file)
    ckpt = torch.load(out / "r2r.pt", weights_only=True)
    assert sorted(ckpt["train_ids"]) == sorted(data.meta["done"])
    critical_rows = int((data["label"] >= 0).sum())
    assert m["training"]["fit_rows"] + m["training"]["val_rows"] + m["rows"] == critical_rows
    # a rerun finds the checkpoint: nothing again, no line in cost.jsonl
    cost = (out / "cost.jsonl").read_text()
    monkeypatch.setattr(tr, "fit_net", lambda *a, **k: pytest.fail("trained again"))
    assert main(args + models) == 0 and (out / "cost.jsonl").read_text() == cost
    assert main([*args, "--epochs", "4", *models]) == 2  # other settings: refused
    monkeypatch.undo()
    # ablation 1: the same network on every divergence, features shared; its held-out examples
    # are the critical run's, and it is also scored against the critical labels
    monkeypatch.setattr(tr, "features_of", lambda *a, **k: pytest.fail("features made again"))
    every = [a if a != str(out) else str(tmp_path / "every") for a in args]
    every += ["--target", "oracle", "--features", str(out / "features")]
    assert main(every + models) == 0
    e = json.loads((tmp_path / "every" / "metrics.json").read_text())
    assert e["target"] == "oracle" and e["examples"] == m["examples"]
    if "on_critical" in e:
        assert e["on_critical"]["rows"] == m["rows"]
    monkeypatch.undo()
    # ablation 2: the learned network on the critical labels
    learned = ["train-learned", "--task", "gsm8k", "--labels", str(label_file), "--target"]
    learned += ["citer", "--epochs", "2", "--bootstrap", "20", "--out", str(tmp_path / "l")]
    assert main(learned + models) == 0
    lm = json.loads((tmp_path / "l" / "metrics.json").read_text())
    assert lm["rows"] == m["rows"] and lm["examples"] == m["examples"]


def test_bad_checkpoints_are_one_user_error(trained, tmp_path):
    root, _, _ = trained
    ckpt = torch.load(root / "out/r2r.pt", weights_only=True)
    torch.save({**ckpt, "kind": "learned"}, tmp_path / "learned.pt")
    torch.save({k: v for k, v in ckpt.items() if k != "state_dict"}, tmp_path / "cut.pt")
    cases = {"nope.pt": "not found", "learned.pt": "not 'r2r'", "cut.pt": "damaged"}
    for name, msg in cases.items():
        with pytest.raises(UserError, match=msg):
            R2RRouter(str(tmp_path / name))


def test_the_experiment_spec_plans_labels_training_rows_and_verdicts(tmp_path):
    """experiments/r2r.toml: labels and training on gsm8k and mbpp with their caps, rows at three
    shares once a checkpoint exists (humaneval runs mbpp's), verdicts against entropy,
    confidence, learned and random, both ablations before the rows (they read no row)."""
    from harness.evaluation import experiment
    from harness.evaluation.experiment import Verdicts
    from tests.test_experiment import ROOT, commands, parses

    r2r = tmp_path / "r2r"
    (r2r / "mbpp").mkdir(parents=True)
    (r2r / "mbpp" / "r2r.pt").write_bytes(b"")
    spec = experiment.load(ROOT / "experiments" / "r2r.toml", out=str(tmp_path / "ed"),
                           sets=[f"vars.r2r={r2r}"])  # fmt: skip
    lines = [" ".join(a) for a in commands(spec)]
    for a in commands(spec):
        parses(a)
    labels = [x for x in lines if x.startswith("r2r-labels ")]
    assert [x.split("--task ")[1].split()[0] for x in labels] == ["gsm8k", "mbpp"]
    assert "--examples 200 --positions 3" in labels[0] and "--positions 6" in labels[1]
    trainings = [x for x in lines if x.startswith("train-r2r ")]
    assert sum("--target critical" in x for x in trainings) == 2
    assert sum("--target oracle" in x and f"--features {r2r}/" in x for x in trainings) == 2
    learned = [x for x in lines if x.startswith("train-learned ")]
    assert len(learned) == 2 and all("--target citer" in x for x in learned)
    first_row = min(i for i, x in enumerate(lines) if x.startswith("sweep "))
    assert all(lines.index(x) < first_row for x in [*trainings, *learned])  # they read no row
    calibrations = [x for x in lines if x.startswith("calibrate --router r2r ")]
    assert [x.split("--task ")[1].split()[0] for x in calibrations] == ["mbpp", "humaneval"]
    sweeps = [x for x in lines if x.startswith("sweep ")]
    assert len(sweeps) == 2 and all("--targets 0.1,0.2,0.35" in x for x in sweeps)
    steps = experiment.steps(spec)
    verdicts = [s for s in steps if isinstance(s, Verdicts)]
    assert [s.against for s in verdicts] == [("entropy", "confidence", "learned", "random")] * 2
    # where no edition row matches an r2r row's share, entropy, confidence and learned are aimed
    # at it, each with the edition's calibration (learned: its own task's checkpoint, or mbpp's)
    aimed = [s for s in steps if isinstance(s, experiment.Controls) and s.setting == "target_share"]
    assert [set(s.pairs) for s in aimed] == [{"entropy", "confidence", "learned"}] * 2
    for s in aimed:
        task = s.folder.name
        learned_argv = " ".join(s.argv["learned"])
        trained_on = "mbpp" if task == "humaneval" else task
        assert f"learned:path=results/learned/{trained_on}/learned.pt" in learned_argv
        assert f"calibration/{task}/learned.json" in learned_argv
    waiting = [s.label for s in steps if isinstance(s, experiment.Note) and "waits" in s.label]
    assert len(waiting) == 2 and all(x.startswith("gsm8k: ") for x in waiting)  # no checkpoint


def test_r2r_status_counts_labelled_examples_and_steps_that_wait(tmp_path):
    """`experiment status` on r2r.toml before any checkpoint: the label step shows how many
    examples its rollouts.jsonl holds, and the paired steps waiting for r2r's checkpoint are
    counted apart, not as done."""
    from harness.evaluation import experiment, experiment_run
    from tests.test_experiment import ROOT

    r2r = tmp_path / "r2r"
    (r2r / "labels-mbpp").mkdir(parents=True)
    (r2r / "labels-mbpp" / "rollouts.jsonl").write_text('{"schema": 1}\n{"id": "a"}\n{"id": "b"}\n')
    spec = experiment.load(ROOT / "experiments" / "r2r.toml", out=str(tmp_path / "ed"),
                           sets=[f"vars.r2r={r2r}"])  # fmt: skip
    lines = experiment_run.report(spec)
    label_mbpp = next(x for x in lines if "mbpp: critical-divergence labels" in x)
    assert label_mbpp.endswith("to do (stats.json not there yet); 3 lines in rollouts.jsonl")
    waits = [s for s in experiment.steps(spec) if isinstance(s, experiment.Note) and s.waits]
    assert len(waits) == 6 and all(s.waits.name == "r2r.pt" for s in waits)
    assert lines[-1].split(";")[0].endswith(f", {len(waits)} wait for a file a step makes")
    assert not lines[-1].startswith(f"{len(experiment.steps(spec))} of")
    # publishing (the spec's own folders: --out drops it) waits as `run` waits: for the steps
    # not done, not for those that wait for a file
    published = experiment.load(ROOT / "experiments" / "r2r.toml", sets=[f"vars.r2r={r2r}"])
    last = experiment_run.report(published)[-2]
    assert "] publish " in last and ": waits until every step is done (" in last
