"""The token label dataset, CITER's router MLP and `train-citer`, on tiny random models."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from harness.backends.engine import Engine
from harness.core.loop import DecodeConfig
from harness.core.router import Decision, Needs, Router
from harness.core.scheduler import generate
from harness.training import labels
from harness.training.citer import FitConfig, train_mlp
from harness.training.labels import LabelConfig, TokenLabels, build_labels, relabel_rollouts
from routers import get_router
from routers.baselines import SmallOnly
from routers.citer import CiterMLP
from tasks.base import Example, Task, user_message
from tests.tiny import BACKENDS, scratch_logits, tiny_backends, tiny_tokenizer


@pytest.fixture(scope="module", params=BACKENDS)
def engine(request):
    return Engine(tiny_tokenizer(), tiny_backends(kind=request.param))


class FakeTask(Task):
    """Three prompts with reference solutions; score() returns a fixed verdict."""

    name, metric, stop, max_new_tokens = "fake", "acc", (), 16

    def __init__(self, verdict: float = 1.0):
        self.verdict = verdict

    def read(self):
        return [
            Example(f"fake/{i}", user_message(f"q{i} 2+{i}?"), str(2 + i), {"solution": s})
            for i, s in enumerate(["so 2+0 = <<2+0=2>>2\n#### 2", "add: 3\n#### 3", "4 #### 4"])
        ]

    def score(self, example, completion):
        return {"acc": self.verdict}

    def reference_answer(self, example):
        return example.meta["solution"]


class ParityTask(FakeTask):
    """Correct when the completion's characters sum to an even number: a verdict that depends on
    every token a rollout wrote, so batched and one-at-a-time rollouts must agree exactly."""

    def score(self, example, completion):
        return {"acc": float(sum(map(ord, completion)) % 2 == 0)}


class Recorder(Router):
    """Keeps every drafted token and records small's hidden state at each step."""

    def __init__(self):
        self.hidden = []

    def needs(self):
        return Needs(draft_len=1, small_hidden=True)

    def decide(self, view):
        self.hidden.append(view.small_hidden[0])
        return Decision(keep=1, defer=False)


def test_reference_answers_are_written_as_the_prompt_asks_and_score_correct():
    """gsm8k: calculator annotations dropped, the answer boxed; mbpp: the gold code fenced. Both
    are what the task's own scorer counts as correct (mbpp's runs in the sandbox)."""
    from tasks import get_task

    gsm8k, mbpp = get_task("gsm8k"), get_task("mbpp")
    for ex in gsm8k.split("train")[:20]:
        ref = labels.reference_text(gsm8k, ex)
        assert "<<" not in ref and "####" not in ref and ref.endswith("}.")
        assert gsm8k.score(ex, ref) == {
            "exact_match": 1.0,
            "exact_match_strict": 0.0,
            "exact_match_flexible": 1.0,
            "extracted": 1.0,
        }
    for ex in mbpp.split("train")[:3]:
        ref = labels.reference_text(mbpp, ex)
        assert ref.startswith("```python\n") and "\r" not in ref
        assert mbpp.score(ex, ref)["pass@1"] == 1.0
    assert labels.reference_text(FakeTask(), FakeTask().load()[0]) == "so 2+0 = <<2+0=2>>2\n#### 2"


def test_teacher_forcing_matches_the_core(engine):
    """Along small's own greedy answer: small's token equals the trajectory everywhere, the
    hidden state equals what the core shows a router, large's token is large's argmax."""
    prompt = engine.encode("hello there")
    rec = Recorder()
    g = generate(engine.backends, rec, prompt, DecodeConfig(max_new_tokens=12))
    traj = list(g.token_ids)
    cols = labels.teacher_force(engine.backends, prompt, traj, top_k=3, chunk=5)
    assert cols["small_token"].tolist() == traj
    torch.testing.assert_close(
        cols["hidden"].float(), torch.stack(rec.hidden).to(torch.bfloat16).float()
    )
    for i in (0, 5, 11):
        ref = scratch_logits(engine.backends["large"], prompt + traj[:i])
        assert int(cols["large_token"][i]) == int(ref.argmax())
    assert torch.all(cols["large_topk_ids"][:, 0] == cols["large_token"])
    assert torch.all(cols["small_topk_probs"][:, :-1] >= cols["small_topk_probs"][:, 1:])


def test_reference_labels_follow_the_shortcut(engine):
    task = FakeTask(verdict=1.0)
    cfg = LabelConfig(mode="reference", max_rollouts=2, rollout_tokens=4, top_k=2)
    ex = task.load()[0]
    cols, _ = labels.label_example(engine, task, ex, cfg, 0, rollout=SmallOnly())
    ctx, s, lg = cols["context_token"], cols["small_token"], cols["large_token"]
    src, lab = cols["label_source"], cols["label"]
    assert torch.equal(src == labels.SMALL_MATCH, s == ctx)
    assert torch.equal(src == labels.LARGE_MATCH, (lg == ctx) & (s != ctx))
    both_miss = (s != ctx) & (lg != ctx)
    assert int((src == labels.ROLLOUT).sum()) == min(2, int(both_miss.sum())) > 0
    assert torch.all(lab[src == labels.SMALL_MATCH] == 1)
    assert torch.all(lab[src == labels.LARGE_MATCH] == 0)
    assert torch.all(lab[src == labels.ROLLOUT] == 1)  # the task says every rollout is right
    assert torch.all(lab[src == labels.UNLABELLED] == -1)
    assert ctx[-1] == engine.tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_label_free_labels_are_agreement(engine):
    cfg = LabelConfig(mode="label_free", max_new_tokens=10)
    ex = FakeTask().load()[1]
    cols, _ = labels.label_example(engine, FakeTask(), ex, cfg, 0)
    agree = cols["small_token"] == cols["large_token"]
    assert torch.equal(cols["label"] == 1, agree) and 0 < int(agree.sum()) < len(agree)


def test_file_roundtrip_resume_and_second_round(engine, tmp_path, monkeypatch):
    task = FakeTask(verdict=1.0)
    cfg = LabelConfig(mode="reference", max_rollouts=1, rollout_tokens=3, top_k=2)
    path = tmp_path / "labels.safetensors"
    exs = task.load()
    first = build_labels(engine, task, exs[:2], cfg, path, progress=False)
    calls = []
    real = labels.plan_example
    monkeypatch.setattr(labels, "plan_example", lambda *a, **k: calls.append(1) or real(*a, **k))
    data = build_labels(engine, task, exs, cfg, path, progress=False)
    assert len(calls) == 1  # the two examples already in the file were not labelled again
    loaded = TokenLabels.load(path)
    assert loaded.meta["done"] == [e.id for e in exs] and len(loaded) == len(data) > len(first)
    for c in labels.COLUMNS:
        assert torch.equal(loaded[c], data[c])
    assert loaded["hidden"].dtype == torch.bfloat16 and loaded["label"].dtype == torch.int8
    with pytest.raises(Exception, match="other settings"):
        build_labels(engine, task, exs, replace(cfg, top_k=3), path, progress=False)
    # round 2: the rollout positions are re-decided with another router (here: wrong answers)
    r2 = relabel_rollouts(
        engine, FakeTask(verdict=0.0), exs, loaded, SmallOnly(), tmp_path / "r2.st", False
    )
    rolled = loaded["label_source"] == labels.ROLLOUT
    assert r2.meta["round"] == 2 and rolled.any()
    assert torch.all(r2["label"][rolled] == 0) and torch.all(loaded["label"][rolled] == 1)
    assert torch.equal(r2["label"][~rolled], loaded["label"][~rolled])


def test_hidden_states_live_apart_and_are_restored_on_resume(engine, tmp_path):
    """The hidden states go to a sibling file (90% of the bytes; results/ keeps the rest in git):
    without it, or with one that does not match, the file loads without them and a resumed
    build_labels makes them again, equal to the first ones."""
    task = FakeTask(verdict=1.0)
    cfg = LabelConfig(mode="reference", max_rollouts=1, rollout_tokens=3, top_k=2)
    path = tmp_path / "labels_r1.safetensors"
    exs = task.load()
    first = build_labels(engine, task, exs[:2], cfg, path, progress=False)
    sibling = tmp_path / "labels_r1.hidden.safetensors"
    assert labels.hidden_path(path) == sibling and sibling.exists()
    assert TokenLabels.load(path).has_hidden
    kept = sibling.read_bytes()
    sibling.unlink()  # a fresh machine: the big file was not kept
    bare = TokenLabels.load(path)
    assert not bare.has_hidden and len(bare) == len(first)
    full = build_labels(engine, task, exs, cfg, path, progress=False)
    rows = torch.isin(full["example"], torch.tensor([0, 1]))
    assert full.has_hidden and torch.equal(full["hidden"][rows], first["hidden"])
    assert torch.equal(TokenLabels.load(path)["hidden"], full["hidden"])
    sibling.write_bytes(kept)  # a sibling of the 2-example file beside the 3-example one
    assert not TokenLabels.load(path).has_hidden


@pytest.mark.parametrize("kind", BACKENDS)
def test_batched_rollouts_equal_one_at_a_time(kind, tmp_path):
    """build_labels and relabel_rollouts decode rollouts `batch` at a time; every rollout label
    equals the definition: the task's verdict on one unbatched greedy continuation (`generate`),
    whatever the batch size, group size or an interruption between groups."""
    from harness.core.loop import DecodeConfig

    task = ParityTask()
    cfg = LabelConfig(mode="reference", max_rollouts=3, rollout_tokens=6, top_k=2)
    exs = task.load()
    one = Engine(tiny_tokenizer(), tiny_backends(kind=kind))
    many = Engine(tiny_tokenizer(), tiny_backends(kind=kind, n_seq=4), batch=4)
    a = build_labels(one, task, exs, cfg, tmp_path / "a.st", progress=False)
    b = build_labels(many, task, exs[:1], cfg, tmp_path / "b.st", progress=False, group=1)
    b = build_labels(many, task, exs, cfg, tmp_path / "b.st", progress=False, group=2)
    for c in ("label", "label_source", "context_token", "small_token"):
        assert torch.equal(a[c], b[c]), c
    rolled = torch.nonzero(a["label_source"] == labels.ROLLOUT).flatten().tolist()
    assert len(rolled) >= 3
    dc = DecodeConfig(max_new_tokens=6, eos_ids=one.eos_ids)

    def verdict(r, router):
        j, pos = int(a["example"][r]), int(a["position"][r])
        ex, prompt = exs[j], one.encode(exs[j].messages)
        prefix = (
            prompt + a["context_token"][a.rows_of(j)[:pos]].tolist() + [int(a["small_token"][r])]
        )
        g = generate(one.backends, router, prefix, dc)
        text = one.decode(prefix[len(prompt) :] + list(g.token_ids))
        return int(task.score(ex, text)["acc"])

    assert [int(a["label"][r]) for r in rolled] == [verdict(r, SmallOnly()) for r in rolled]
    assert len({int(a["label"][r]) for r in rolled}) == 2  # the check can tell labels apart
    # round 2 with another router (large alone), interrupted after the first group and resumed
    path = tmp_path / "r2.st"
    large = get_router("large")
    with pytest.raises(KeyboardInterrupt):
        calls = []

        def stop_second(*args, **kw):
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real(*args, **kw)

        real = labels.run_rollouts
        labels.run_rollouts = stop_second
        try:
            relabel_rollouts(many, task, exs, a, large, path, progress=False, group=2)
        finally:
            labels.run_rollouts = real
    assert TokenLabels.load(path).meta["relabelled"] == 2
    r2 = relabel_rollouts(many, task, exs, a, large, path, progress=False, group=2)
    assert r2.meta["relabelled"] == len(rolled) and r2.meta["round"] == 2
    assert [int(r2["label"][r]) for r in rolled] == [verdict(r, large) for r in rolled]


def test_citer_share_recalibrates_tau(tmp_path):
    path = save_citer(tmp_path / "c.pt", bias=0.0)
    ckpt = torch.load(path, weights_only=True)
    ckpt["calib_scores"] = torch.tensor([0.1, 0.2, 0.3, 0.4])
    torch.save(ckpt, path)
    assert get_router("citer", {"path": path, "share": 0.5}).threshold == pytest.approx(0.25)
    assert get_router("citer", {"path": path, "share": 0.5, "threshold": 0.7}).threshold == 0.7
    assert get_router("citer", {"path": path}).threshold == 0.5
    needs = get_router("citer", {"path": path}).needs()
    assert needs.small_hidden and needs.small_logits == "argmax"  # its hidden state, not q
    from routers.citer import Citer

    assert Citer.sweep_settings([0.1, 0.35]) == [{"share": 0.1}, {"share": 0.35}]
    assert Citer.sweep_settings([0.1], {"path": path}) == [{"share": 0.1}]
    old = save_citer(tmp_path / "old.pt", bias=0.0)  # no calib scores: runs once, at its tau
    assert Citer.sweep_settings([0.1, 0.35], {"path": old}) == [{}]


def test_cost_log_records_failures_too(tmp_path):
    from harness.backends import engine
    from harness.training.common import cost_log, nothing_to_do, total_cost

    with pytest.raises(RuntimeError), cost_log(tmp_path, ["train-x"]):
        engine.GENERATED[0] += 7
        raise RuntimeError("boom")
    with cost_log(tmp_path, ["train-x"]):
        engine.GENERATED[0] += 5
    rows = [json.loads(x) for x in (tmp_path / "cost.jsonl").read_text().splitlines()]
    assert [(r["status"], r["tokens_generated"]) for r in rows] == [("failed", 7), ("done", 5)]
    assert all(r["cpu_s"] >= 0 for r in rows) and total_cost(tmp_path)["without_cpu"] == 0
    assert (
        total_cost(tmp_path)["tokens_generated"] == 12 and total_cost(tmp_path)["invocations"] == 2
    )
    with cost_log(tmp_path, ["train-x"]):  # found its work done: no line
        nothing_to_do()
    with pytest.raises(RuntimeError), cost_log(tmp_path, ["train-x"]):  # a failure still logs
        nothing_to_do()
        raise RuntimeError("boom")
    with cost_log(tmp_path, ["train-x"]):  # the flag does not outlive its invocation
        pass
    rows = [json.loads(x)["status"] for x in (tmp_path / "cost.jsonl").read_text().splitlines()]
    assert rows == ["failed", "done", "failed", "done"]


def test_mlp_training_learns_a_separable_signal():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(800, 16, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).float()
    groups = torch.arange(800) // 10
    mlp, stats = train_mlp(x, y, groups, FitConfig(epochs=15, seed=0), progress=False)
    assert stats["val_acc"] > 0.9 and stats["val_rows"] == 160


def save_citer(path, bias: float, hidden=48, train_ids=("fake/0",), calib_ids=("fake/1",)):
    mlp = CiterMLP(hidden)
    with torch.no_grad():
        mlp.net[-1].weight.zero_()
        mlp.net[-1].bias.fill_(bias)
    torch.save(
        {
            "kind": "citer",
            "hidden_size": hidden,
            "state_dict": mlp.state_dict(),
            "threshold": 0.5,
            "train_ids": list(train_ids),
            "calib_ids": list(calib_ids),
        },
        path,
    )
    return str(path)


def test_citer_router_keeps_or_defers_by_threshold(engine, tmp_path):
    path = save_citer(tmp_path / "c.pt", bias=2.0)  # P(small suffices) = sigmoid(2) = 0.88
    prompt = engine.encode("hi")
    cfg = DecodeConfig(max_new_tokens=10)

    def run(router):
        return generate(engine.backends, router, prompt, cfg)

    keep = run(get_router("citer", {"path": path}))
    assert keep.token_ids == run(SmallOnly()).token_ids and set(keep.provenance) == {0}
    defer = run(get_router("citer", {"path": path, "threshold": 0.9}))
    assert defer.token_ids == run(get_router("large")).token_ids and set(defer.provenance) == {1}
    r = get_router("citer", {"path": path, "draft_len": 3})
    assert r.used_example_ids() == {"fake/0", "fake/1"} and r.needs().draft_len == 3


def test_missing_checkpoint_is_a_user_error(tmp_path):
    from harness.errors import UserError

    with pytest.raises(UserError, match="not found"):
        get_router("citer", {"path": str(tmp_path / "nope.pt")})


def test_train_citer_cli_end_to_end(tmp_path):
    """train-citer (label_free: random tiny models never match a reference) on the tiny pair and
    gsm8k, 2 rounds; then the runner refuses the train split and evaluates on test."""
    from harness.cli.main import main
    from tests.tiny import save_tiny_pair

    small, large = save_tiny_pair(tmp_path / "m")
    models = ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]
    out = tmp_path / "citer"
    args = ["train-citer", "--task", "gsm8k", "--train-limit", "3", "--calib-limit", "1"]
    args += ["--mode", "label_free", "--max-new-tokens", "12", "--epochs", "2", "--out", str(out)]
    assert main(args + models) == 0
    for f in ("labels_r1.safetensors", "labels_r2.safetensors", "citer_r1.pt", "citer.pt"):
        assert (out / f).exists(), f
    ckpt = torch.load(out / "citer.pt", weights_only=True)
    assert ckpt["round"] == 2 and len(ckpt["train_ids"]) == 3 and 0 < ckpt["threshold"] < 1
    # round 2's trajectories, decoded with round 1's router, each with its large-token count
    traj = [json.loads(x) for x in (out / "trajectories_r2.jsonl").read_text().splitlines()]
    assert len(traj) == 3 and all(0 <= t["large"] <= len(t["token_ids"]) for t in traj)
    (cost,) = [json.loads(x) for x in (out / "cost.jsonl").read_text().splitlines()]
    assert cost["status"] == "done" and cost["tokens_generated"] > 0 and cost["wall_s"] > 0
    # a checkpoint saved before stats had val_auc gets it on the next run, from the same
    # validation rows (a seeded split) and its own MLP: the figure training computed
    r1 = torch.load(out / "citer_r1.pt", weights_only=True)
    want = r1["stats"].pop("val_auc")
    torch.save(r1, out / "citer_r1.pt")
    assert main(args + models) == 0
    after = torch.load(out / "citer_r1.pt", weights_only=True)
    assert after["stats"]["val_auc"] == pytest.approx(want, nan_ok=True)
    assert all(torch.equal(after["state_dict"][k], v) for k, v in r1["state_dict"].items())
    run = ["run", "--task", "gsm8k", "--router", "citer", "--router-arg", f"path={out}/citer.pt"]
    run += ["--limit", "1", "--max-new-tokens", "4", *models]
    assert main([*run, "--split", "train", "--out", str(tmp_path / "r1")]) == 2
    assert main([*run, "--split", "test", "--out", str(tmp_path / "r2")]) == 0


def test_label_free_reads_train_and_calib_trajectories_from_runs(tmp_path, monkeypatch, capsys):
    """--trajectories TRAIN_RUN,CALIB_RUN (small-only runs' records): nothing is decoded again,
    and tau is calibrated on the calib run's tokens."""
    from harness.cli.main import main
    from harness.training import citer as tc
    from tests.tiny import save_tiny_pair

    small, large = save_tiny_pair(tmp_path / "m")
    models = ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]
    runs = {}
    for split, n in (("train", 3), ("calib", 2)):
        runs[split] = tmp_path / f"{split}-small" / "records.jsonl"
        run = ["run", "--task", "gsm8k", "--router", "small", "--split", split, "--limit", str(n)]
        assert (
            main([*run, "--max-new-tokens", "12", "--out", str(runs[split].parent), *models]) == 0
        )

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded although every trajectory was given")

    monkeypatch.setattr(tc, "_decode", no_decoding)
    out = tmp_path / "citer"
    args = ["train-citer", "--task", "gsm8k", "--train-limit", "3", "--calib-limit", "2"]
    args += ["--mode", "label_free", "--max-new-tokens", "12", "--epochs", "2", "--rounds", "1"]
    args += ["--trajectories", f"{runs['train']},{runs['calib']}", "--out", str(out)]
    assert main(args + models) == 0
    calib_tokens = sum(
        len(json.loads(line)["generation"]["token_ids"])
        for line in runs["calib"].read_text().splitlines()
    )
    assert len(torch.load(out / "citer.pt", weights_only=True)["calib_scores"]) == calib_tokens
    # benchmarks/citer_shift.py on the calib run tau was calibrated on: it recomputes the same
    # scores from small's hidden states, so it defers what the checkpoint's calib scores say
    from tests import load_script

    shift = load_script("citer_shift")
    calib = torch.load(out / "citer.pt", weights_only=True)["calib_scores"]
    got = shift.deferred_shares(out / "citer.pt", runs["calib"], [0.25, 0.5], dtype="float32")
    for _share, tau, deferred, n in got:
        assert n == calib_tokens
        assert deferred == pytest.approx(float((calib < tau).float().mean()), abs=1e-9)
    # `calibrate --router citer` along the same answers gives the same scores (label-free CITER
    # calibrates along small's own answers), and target_share=S with that file sets tau
    from harness.errors import UserError
    from harness.evaluation import sweep
    from routers.calibration import threshold_for

    cal_path = tmp_path / "citer-cal.json"
    cal = ["calibrate", "--router", "citer", "--task", "gsm8k", "--limit", "2"]
    cal += ["--records", str(runs["calib"]), "--out", str(cal_path), *models]
    assert main(cal) == 2  # no --checkpoint: refused
    assert main([*cal, "--checkpoint", str(out / "citer.pt")]) == 0
    scores = json.loads(cal_path.read_text())["scores"]
    # (training keeps hidden states in bf16; calibrate scores them as the router reads them)
    assert scores == pytest.approx(calib.tolist(), abs=1e-3)
    # citer_shift.py given that file reads its scores (no model): each tau defers the share of
    # the file's scores below it, the shares the records path found up to those 1e-3 differences
    from_file = shift.calibration_shares(out / "citer.pt", cal_path, [0.25, 0.5])
    for (_, tau, deferred, n), (_, tau_rec, deferred_rec, _) in zip(from_file, got, strict=True):
        assert n == calib_tokens and tau == tau_rec
        assert deferred == sum(s < tau for s in torch.tensor(scores).tolist()) / n
        assert deferred == pytest.approx(deferred_rec, abs=1 / n + 1e-9)
    monkeypatch.setattr("sys.argv", ["citer_shift", str(out / "citer.pt"), str(cal_path)])
    capsys.readouterr()
    assert shift.main() == 0  # the default shares 0.1, 0.2, 0.35
    ((_, tau, deferred, n),) = shift.calibration_shares(out / "citer.pt", cal_path, [0.2])
    printed = capsys.readouterr().out
    assert f"asked 0.2: tau {tau:.4f}, deferred {deferred:.4f} of {n} tokens" in printed
    args = {"path": str(out / "citer.pt"), "target_share": 0.5, "calibration": str(cal_path)}
    router = get_router("citer", args)
    assert router.threshold == pytest.approx(threshold_for("citer", scores, 0.5))
    assert router.describe()["target_share"] == 0.5 and "share" not in router.describe()
    # calibrated on another task's calib answers (humaneval's rows run mbpp's MLP): those ids are
    # used (never evaluated on), but the MLP learned from gsm8k alone, so a run elsewhere is transfer
    there = {**json.loads(cal_path.read_text()), "example_ids": ["humaneval/calib/0"]}
    (tmp_path / "there.json").write_text(json.dumps(there))
    moved = get_router("citer", {**args, "calibration": str(tmp_path / "there.json")})
    assert "humaneval/calib/0" in moved.used_example_ids()
    assert moved.trained_on() == router.trained_on() == ("gsm8k",)
    other = torch.load(out / "citer.pt", weights_only=True)
    torch.save({**other, "threshold": 0.25}, tmp_path / "other.pt")  # another file
    with pytest.raises(UserError, match="another checkpoint"):
        get_router("citer", {**args, "path": str(tmp_path / "other.pt")})
    with pytest.raises(UserError, match="another checkpoint"):
        shift.calibration_shares(tmp_path / "other.pt", cal_path, [0.2])
    with pytest.raises(UserError, match="not both"):
        get_router("citer", {**args, "share": 0.2})
    fixed = {"path": str(out / "citer.pt"), "calibration": str(cal_path)}
    assert sweep.router_settings("citer", [0.1, 0.2], fixed) == [
        {"target_share": 0.1}, {"target_share": 0.2}]  # fmt: skip
