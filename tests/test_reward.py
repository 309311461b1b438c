"""The reward-token router on tiny random models: equivalences, causality of the incremental
reward cache, the pairwise loss, calibration, and the CLI pipeline data -> train -> calibrate -> run."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from harness.backends.reward_model import RewardBackend, RewardModel, model_info
from harness.core.loop import DecodeConfig
from harness.core.scheduler import generate
from harness.training.reward import pair_features, token_scores
from harness.training.reward_data import SynthConfig, chunk_lengths, synthesize_one
from harness.training.reward_heads import (
    Pairs,
    TrainConfig,
    evaluate,
    preference_loss,
    select_l2,
    train_head,
)
from routers import get_router
from routers.reward import RewardRouter, calibrated_threshold
from tests.test_core import PROMPT, hf_greedy
from tests.tiny import BACKENDS, tiny_backends, tiny_model

N = 24


def tiny_reward(seed: int = 5) -> RewardModel:
    """A 2-layer random backbone (the tiny pair's vocabulary) with a random head."""
    model = RewardModel(tiny_model(seed, layers=2, hidden=48).model).eval()
    with torch.no_grad():
        model.head.weight.normal_(0, 1, generator=torch.Generator().manual_seed(seed))
    return model


@pytest.fixture(scope="module", params=BACKENDS)
def models(request):
    backends = tiny_backends(kind=request.param)
    reward = tiny_reward()
    backends["reward"] = RewardBackend(reward, model_info(reward, "tiny", "float32"))
    return backends


@pytest.fixture(scope="module")
def greedy(models):
    return {role: hf_greedy(models[role]) for role in ("small", "large")}


@pytest.fixture(scope="module")
def median(models):
    """The median reward of small's greedy tokens: a threshold that both keeps and defers."""
    probe = Recording(threshold=-math.inf)
    run(models, probe)
    return float(torch.cat([r for _, r in probe.seen]).median())


def run(models, router, **cfg):
    return generate(models, router, PROMPT, DecodeConfig(**{"max_new_tokens": N, **cfg}))


class Recording(RewardRouter):
    """The reward router, keeping every reward score the core showed it."""

    def reset(self):
        self.seen = []

    def decide(self, view):
        self.seen.append((view.n_generated, view.reward.clone()))
        return super().decide(view)


# --- routing -----------------------------------------------------------------------------------


def test_threshold_minus_inf_equals_small_greedy(models, greedy):
    g = run(models, RewardRouter(threshold=-math.inf))
    assert list(g.token_ids) == greedy["small"]
    assert set(g.provenance) == {0} and not any(s.large_called for s in g.steps)
    reward = [f.phase for f in g.forwards if f.model == "reward"]
    assert reward == ["prefill"] + ["score"] * (N - 1)  # one pass per drafted token, cached


def test_reads_the_reward_not_small_logits():
    needs = RewardRouter(threshold=0.0).needs()
    assert needs.reward and needs.small_logits == "argmax"  # small's argmax only


def test_threshold_plus_inf_equals_large_greedy(models, greedy):
    g = run(models, RewardRouter(threshold=math.inf))
    assert list(g.token_ids) == greedy["large"]
    assert set(g.provenance) == {1}


@pytest.mark.parametrize("draft_len", [1, 3])
def test_accept_at_or_above_threshold_else_large(models, median, draft_len):
    """Every drafted token scoring >= threshold was kept, the first one below it was replaced by
    large's token; with a median threshold both happen."""
    router = Recording(threshold=median, draft_len=draft_len)
    g = run(models, router)
    assert 0 < sum(g.provenance) < len(g.provenance)
    for n, rewards in router.seen:
        below = (rewards < median).nonzero().flatten().tolist()
        kept = below[0] if below else len(rewards)
        assert g.provenance[n : n + kept] == (0,) * kept
        if below and n + kept < len(g.provenance):
            assert g.provenance[n + kept] == 1


# --- causality: the incremental cache equals a full forward ----------------------------------


def test_reward_at_a_position_ignores_later_tokens():
    model = tiny_reward()
    seq = PROMPT + [40, 41, 42, 43, 44]
    full = token_scores(model, [], seq)
    for cut in (3, len(PROMPT), len(seq) - 1):
        assert token_scores(model, [], seq[:cut]) == pytest.approx(full[:cut], abs=1e-5)


def test_incremental_cache_with_rollback_matches_full_forward():
    model = tiny_reward()
    b = RewardBackend(model, model_info(model, "tiny", "float32"))
    b.reset()
    seq = PROMPT + [40, 41, 42]
    b.forward(PROMPT, 1)
    inc = b.forward([40, 41, 42], 3)[0][:, 0]
    assert b.length == len(seq)
    torch.testing.assert_close(
        inc, torch.tensor(token_scores(model, [], seq)[-3:]), atol=1e-5, rtol=0
    )
    b.crop(len(PROMPT) + 1)  # reject 41, 42; take another branch
    got = b.forward([50, 51], 2)[0][:, 0]
    ref = token_scores(model, [], PROMPT + [40, 50, 51])[-2:]
    torch.testing.assert_close(got, torch.tensor(ref), atol=1e-5, rtol=0)


def test_scores_seen_during_decoding_equal_full_forward_scores(models, median):
    """What the core showed the router for each kept token equals one full pass over the
    final sequence: the reward cache never re-read or mis-aligned the prefix across rollbacks."""
    router = Recording(threshold=median, draft_len=3)
    g = run(models, router)
    full = token_scores(models["reward"].model, PROMPT, list(g.token_ids))
    checked = 0
    for n, rewards in router.seen:
        for i, r in enumerate(rewards.tolist()):
            if n + i < len(g.provenance) and g.provenance[n + i] == 0 and r >= median:
                assert r == pytest.approx(full[n + i], abs=1e-5)
                checked += 1
            else:
                break
    assert checked > 5


def test_reward_cost_is_recorded_and_cheaper_than_small(models):
    g = run(models, RewardRouter(threshold=0.0))
    scored = [f for f in g.forwards if f.model == "reward"]
    assert len(scored) == len(g.steps) and all(f.tokens_in >= 1 for f in scored)
    assert models["reward"].info.weight_bytes < models["small"].info.weight_bytes
    # per cached element: llama.cpp keeps its KV cache in f16, the tiny reward model in float32
    assert kv_elements(models["reward"].info) < kv_elements(models["small"].info)


def kv_elements(info) -> float:
    size = 2 if info.backend.startswith("llama.cpp") else getattr(torch, info.dtype).itemsize
    return info.kv_bytes_per_token / size


# --- loss and training -----------------------------------------------------------------------


def test_preference_loss_sign_and_value():
    assert float(preference_loss(torch.zeros(3), torch.zeros(3))) == pytest.approx(math.log(2))
    assert float(preference_loss(torch.tensor([2.0]), torch.tensor([0.0]))) < math.log(2)
    assert float(preference_loss(torch.tensor([0.0]), torch.tensor([2.0]))) > math.log(2)


def toy_records(n: int = 12) -> list[dict]:
    """A separable preference set: chosen chunks are runs of one token, rejected of another."""
    rng = random.Random(0)
    out = []
    for i in range(n):
        prompt = [rng.randrange(3, 100) for _ in range(6)]
        large, small = [40] * 10, [70] * 10
        chunks = [{"length": n, "chosen": large[:n], "rejected": small[:n]} for n in (1, 4, 10)]
        out.append(
            {
                "id": f"toy/{i}",
                "prompt_ids": prompt,
                "large": {"ids": large},
                "small": {"ids": small},
                "chunks": chunks,
            }
        )
    return out


def test_loss_decreases_on_a_separable_toy_set():
    model = tiny_reward()
    pairs, ties = pair_features(model, toy_records())
    assert ties == 0 and len(pairs) == 36
    history = []
    state = train_head(
        pairs,
        TrainConfig(epochs=20, lr=1e-2, l2=0.0, batch_size=16),
        on_epoch=lambda s: history.append(evaluate(s["head"], pairs)["loss"]),
    )
    assert evaluate(torch.zeros_like(state["head"]), pairs)["loss"] == pytest.approx(math.log(2))
    assert math.log(2) > history[0] > history[5] > history[-1]
    assert history[-1] < 0.1 * math.log(2)
    assert evaluate(state["head"], pairs)["acc"] == 1.0


def test_heldout_intervals_resample_prompts_not_pairs():
    # prompt a: three pairs the head ranks right; prompt b: one it ranks wrong. Accuracy 0.75;
    # resampling prompts, a resample is all a (1.0), all b (0.0) or both (0.75): the interval
    # spans [0, 1], where resampling the four pairs as if independent would be narrower
    x = torch.tensor([[1.0], [1.0], [1.0], [-1.0]])
    pairs = Pairs(x, -x, torch.ones(4, dtype=torch.long), ("t/a", "t/a", "t/a", "t/b"))
    head = torch.tensor([1.0])
    assert evaluate(head, pairs)["acc"] == 0.75
    ci = evaluate(head, pairs, ci=True)
    assert ci["n_prompts"] == 2 and ci["acc_ci"] == [0.0, 1.0]
    loss = evaluate(head, pairs)["loss"]
    assert ci["loss"] == loss and ci["loss_ci"][0] < loss < ci["loss_ci"][1]
    right = evaluate(head, pairs.select(torch.tensor([True, True, True, False])), ci=True)
    assert right["acc_ci"] == [1.0, 1.0] and right["n_prompts"] == 1
    assert evaluate(head, pairs.select(torch.zeros(4, dtype=torch.bool)), ci=True)["n_prompts"] == 0


def test_training_resumes_to_the_same_head():
    pairs, _ = pair_features(tiny_reward(), toy_records())
    cfg = TrainConfig(epochs=10, lr=1e-2, l2=0.1, batch_size=8)
    saved = {}
    full = train_head(pairs, cfg, on_epoch=lambda s: saved.setdefault(s["epoch"], s))
    resumed = train_head(pairs, cfg, state=saved[4])
    torch.testing.assert_close(resumed["head"], full["head"])


def xor_pairs(n: int = 400) -> Pairs:
    """Preferences no linear head can fit: chosen when x0 * x1 > 0 (an XOR of two signs)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, 8, generator=g), torch.randn(n, 8, generator=g)
    good_a = (a[:, 0] * a[:, 1] > 0) & (b[:, 0] * b[:, 1] < 0)
    good_b = (b[:, 0] * b[:, 1] > 0) & (a[:, 0] * a[:, 1] < 0)
    keep = good_a | good_b
    chosen = torch.where(good_a[:, None], a, b)[keep]
    rejected = torch.where(good_a[:, None], b, a)[keep]
    k = len(chosen)
    return Pairs(
        chosen, rejected, torch.ones(k, dtype=torch.long), tuple(f"t/{i}" for i in range(k))
    )


def test_mlp_head_learns_what_a_linear_head_cannot_and_resumes():
    from harness.training.reward_heads import state_head

    pairs = xor_pairs()
    lin = train_head(pairs, TrainConfig(epochs=30, lr=1e-2, l2=0.0, batch_size=32))
    cfg = TrainConfig(epochs=40, lr=1e-2, l2=0.0, batch_size=32, head="mlp")
    saved = {}
    mlp = train_head(pairs, cfg, on_epoch=lambda s: saved.setdefault(s["epoch"], s))
    assert evaluate(lin["head"], pairs)["acc"] < 0.7 < 0.9 < evaluate(state_head(mlp), pairs)["acc"]
    resumed = train_head(pairs, cfg, state=saved[20])
    for k, v in mlp["head_state"].items():
        torch.testing.assert_close(resumed["head_state"][k], v)
    # the folded head reads raw features: the same scores as the net on standardized ones
    from harness.backends.reward_model import make_head
    from harness.training.reward_heads import feature_scale

    net = make_head(8, "mlp")
    net.load_state_dict(mlp["params"])
    x = pairs.chosen[:5]
    torch.testing.assert_close(state_head(mlp)(x), net(x / feature_scale(pairs)).detach())


def test_l2_is_chosen_by_cross_validation_over_prompts():
    """On a separable set the weakest penalty predicts unseen prompts best (every one ranks all
    pairs right: the loss breaks the tie), so the grid grows downward past 0.01."""
    pairs, _ = pair_features(tiny_reward(), toy_records())
    best, table = select_l2(pairs, TrainConfig(epochs=10, batch_size=16), grid=(0.01, 10.0))
    assert list(table)[-3:] == [1e-5, 0.01, 10.0] and best < 0.01
    assert table[best]["loss"] <= table[0.01]["loss"] < table[10.0]["loss"] < math.log(2)
    assert table[best]["acc"] == max(v["acc"] for v in table.values()) > 0.5


def test_l2_grid_grows_past_an_end_while_that_end_is_best():
    """The grid grows by its end's last ratio while that end is best (L2_EXTEND values at most
    each way), and stops once a value does worse."""
    from harness.training.reward_heads import grow_grid

    def peak(at):  # a measure whose best lies at `at`; it logs what it was asked
        def f(x):
            seen.append(x)
            return -abs(math.log10(x) - math.log10(at))

        return f

    seen = []
    table = grow_grid((0.1, 1.0), peak(30), key=lambda v: v, extend=4)
    assert seen == list(table) == [0.1, 1.0, 10.0, 100.0]  # 100 did worse than 10: stop
    seen = []
    table = grow_grid((1.0, 0.1), peak(0.003), key=lambda v: v, extend=4)
    assert seen == [0.1, 1.0, 0.01, 0.001, 0.0001] and list(table) == sorted(seen)
    assert list(grow_grid((0.1, 1.0), peak(30), key=lambda v: v, extend=1)) == [0.1, 1, 10]
    assert list(grow_grid((1.0, 10.0, 100.0), peak(30), key=lambda v: v, extend=4)) == [1, 10, 100]


def test_ties_are_dropped():
    recs = toy_records(2)
    recs[0]["chunks"].append({"length": 2, "chosen": [40, 40], "rejected": [40, 40]})
    pairs, ties = pair_features(tiny_reward(), recs)
    assert ties == 1 and len(pairs) == 6


# --- data synthesis --------------------------------------------------------------------------


def test_chunk_lengths():
    rng = random.Random(0)
    got = chunk_lengths(30, 7, 16, rng)
    assert got == list(range(1, 8))  # fewer lengths than asked: every one of 1..min
    got = chunk_lengths(100, 50, 5, rng)
    assert len(got) == 5 == len(set(got)) and all(1 <= n <= 50 for n in got)
    assert chunk_lengths(0, 9, 4, rng) == []


def test_synthesis_pairs_same_length_chunks_and_is_seeded(models):
    from harness.backends.engine import Engine
    from tasks.base import Example, user_message
    from tests.tiny import tiny_tokenizer

    engine = Engine(tiny_tokenizer(), {k: models[k] for k in ("small", "large")})
    ex = Example("toy/1", user_message("What is 2+3?"), "5")
    cfg = SynthConfig(max_new_tokens=20, chunks=5, seed=3)
    a, b = synthesize_one(engine, "toy", ex, cfg), synthesize_one(engine, "toy", ex, cfg)
    assert a == b
    assert a["small"]["temperature"] != a["large"]["temperature"]
    for c in a["chunks"]:
        assert len(c["chosen"]) == len(c["rejected"]) == c["length"]
        assert c["chosen"] == a["large"]["ids"][: c["length"]]
        assert c["rejected"] == a["small"]["ids"][: c["length"]]
    assert a != synthesize_one(engine, "toy", ex, SynthConfig(max_new_tokens=20, chunks=5, seed=4))


# --- calibration and router arguments --------------------------------------------------------


def test_calibrated_threshold_hits_the_target_share():
    assert calibrated_threshold([1, 2, 3, 4, 5], 0.5) == 3.0
    scores = torch.randn(10_000, generator=torch.Generator().manual_seed(0)).tolist()
    for target in (0.1, 0.3, 0.9):
        t = calibrated_threshold(scores, target)
        assert sum(s < t for s in scores) / len(scores) == pytest.approx(target, abs=1e-3)
    assert calibrated_threshold(scores, 0.0) == -math.inf
    assert calibrated_threshold(scores, 1.0) == math.inf


def test_router_argument_errors_are_user_errors(tmp_path):
    from harness.errors import UserError

    with pytest.raises(UserError, match="threshold=X or target_share"):
        get_router("reward", {})
    with pytest.raises(UserError, match="calibration=FILE"):
        get_router("reward", {"target_share": 0.3})
    with pytest.raises(UserError, match="checkpoint not found"):
        get_router("reward", {"threshold": 1.0, "checkpoint": str(tmp_path / "nope.pt")})
    (tmp_path / "bad.pt").write_text("not a checkpoint")
    with pytest.raises(UserError, match="not a reward checkpoint"):
        get_router("reward", {"threshold": 1.0, "checkpoint": str(tmp_path / "bad.pt")})


# --- the command line, end to end on the tiny pair -------------------------------------------


def test_cli_data_train_calibrate_run(tmp_path, capsys):
    from harness.cli.main import main
    from tests.tiny import save_tiny_pair

    small, large = save_tiny_pair(tmp_path / "pair")
    pair = ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]
    data, model = tmp_path / "data", tmp_path / "model"
    argv = [
        "reward-data",
        "--out",
        str(data),
        "--tasks",
        "gsm8k,commonsense_qa",
        "--prompts",
        "6",
        "--max-new-tokens",
        "12",
        "--chunks",
        "4",
        *pair,
    ]
    assert main(argv) == 0
    rows = [json.loads(x) for x in (data / "pairs.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and {r["task"] for r in rows} == {"gsm8k", "commonsense_qa"}
    assert all(
        r["id"] in json.loads((data / "manifest.json").read_text())["example_ids"] for r in rows
    )
    (data / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]) + '{"cut')
    assert main(argv) == 0  # resume: a half-written line is dropped, the 2 missing redone
    again = [json.loads(x) for x in (data / "pairs.jsonl").read_text().splitlines()]
    assert again == rows
    # each invocation logged its cost: the tokens it generated (all 6 prompts, then the 2 redone)
    from harness.training.common import total_cost

    cost = [json.loads(x) for x in (data / "cost.jsonl").read_text().splitlines()]
    made = [len(r["small"]["ids"]) + len(r["large"]["ids"]) for r in rows]
    assert [c["tokens_generated"] for c in cost] == [sum(made), sum(made[4:])]
    assert [c["status"] for c in cost] == ["done", "done"] and cost[0]["argv"] == argv
    assert total_cost(data)["tokens_generated"] == sum(made) + sum(made[4:])
    capsys.readouterr()
    assert main(argv) == 0  # complete: nothing loaded or decoded, no cost line (chain restarts)
    assert "6 prompts (0 new)" in capsys.readouterr().out
    assert total_cost(data)["invocations"] == 2

    train = [
        "train-reward",
        "--data",
        str(data),
        "--out",
        str(model),
        "--layers",
        "2",
        "--dtype",
        "float32",
        "--l2",
        "0.1",
        "--epochs",
        "20",
        "--holdout",
        "0.34",
        "--save-every",
        "5",
    ]
    assert main(train) == 0
    out = capsys.readouterr().out
    assert "features: 6 of 6 prompts" in out  # computed by the first run
    assert "accuracy by task: " in out and "prompts)" in out
    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["n_pairs"]["train"] > 0 and metrics["n_pairs"]["heldout"] > 0
    assert metrics["final"]["train"]["loss"] < metrics["untrained"]["train"]["loss"]
    by_task = metrics["heldout_by_task"]  # the held-out pairs, split by their prompt's task
    assert sum(v["n"] for v in by_task.values()) == metrics["n_pairs"]["heldout"]
    assert set(by_task) <= {"gsm8k", "commonsense_qa"} and metrics["seconds"]["training"] >= 0
    held = metrics["final"]["heldout"]  # with 95% intervals, prompts resampled
    assert held["acc_ci"][0] <= held["acc"] <= held["acc_ci"][1]
    assert held["loss_ci"][0] <= held["loss"] <= held["loss_ci"][1]
    assert sum(v["n_prompts"] for v in by_task.values()) == held["n_prompts"]
    stamp = (model / "metrics.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(train) == 0  # finished with these settings: said so, nothing retrained
    out = capsys.readouterr().out
    assert "already trained with these settings" in out and "accuracy by task: " in out
    assert (model / "metrics.json").stat().st_mtime_ns == stamp
    assert total_cost(model)["invocations"] == 1  # the re-run that did nothing logged no cost
    (model / "metrics.json").unlink()  # cut before the end: resumes from train_state.pt
    assert main(train) == 0 and "already trained" not in capsys.readouterr().out
    assert json.loads((model / "metrics.json").read_text())["final"] == metrics["final"]
    # --l2 left to cross-validation: the choice is kept, an interrupted run does not redo it
    cv_run = [*train[: train.index("--l2")], *train[train.index("--l2") + 2 :], "--epochs", "2"]
    cv_run[cv_run.index(str(model))] = str(tmp_path / "model-cv")
    assert main(cv_run) == 0
    assert "choosing --l2" in capsys.readouterr().out
    (tmp_path / "model-cv" / "metrics.json").unlink()
    assert main(cv_run) == 0
    assert "chosen by 5-fold cross-validation before" in capsys.readouterr().out
    assert main(cv_run) == 0 and "already trained" in capsys.readouterr().out
    for name in ("metrics.json", "l2_cv.json"):  # a new search: the old state is not resumed
        (tmp_path / "model-cv" / name).unlink()
    assert main(cv_run) == 0 and "training starts over" in capsys.readouterr().out
    ck = str(model / "reward.pt")
    # the MLP head on the same data and features: a checkpoint the transformers and llama.cpp
    # reward backends both load, scoring alike
    mlp = tmp_path / "model-mlp"
    argv_mlp = [
        *train[: train.index("--out")],
        "--out",
        str(mlp),
        *train[train.index("--out") + 2 :],
    ]
    assert main([*argv_mlp, "--head", "mlp", "--epochs", "3", "--l2", "0.001"]) == 0
    # same data, backbone, depth and dtype: the linear head's features, not computed again
    assert "features:" not in capsys.readouterr().out
    assert len(list(data.glob("features-*"))) == 1
    from harness.backends.reward_model import load_reward_model

    m, c = load_reward_model(mlp / "reward.pt", "float32")
    assert c["head_kind"] == "mlp" and isinstance(m.head, torch.nn.Sequential)
    assert json.loads((mlp / "metrics.json").read_text())["config"]["head"] == "mlp"

    cal = tmp_path / "calib.json"
    assert (
        main(
            [
                "calibrate-reward",
                "--checkpoint",
                ck,
                "--task",
                "gsm8k",
                "--limit",
                "2",
                "--max-new-tokens",
                "10",
                "--out",
                str(cal),
                *pair,
            ]
        )
        == 0
    )
    c = json.loads(cal.read_text())
    assert c["n_tokens"] == len(c["scores"]) > 0 and c["split"] == "calib"

    out = tmp_path / "run"
    run = [
        "run",
        "--task",
        "gsm8k",
        "--router",
        "reward",
        "--router-arg",
        f"checkpoint={ck}",
        "--router-arg",
        "target_share=0.5",
        "--router-arg",
        f"calibration={cal}",
        "--limit",
        "2",
        "--max-new-tokens",
        "10",
        "--out",
        str(out),
        *pair,
    ]
    assert main(run) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["models"]["reward"]["n_params"] < manifest["models"]["small"]["n_params"]
    assert manifest["router_args"]["threshold"] == c["thresholds"]["0.5"]
    rec = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert "reward" in rec["generation"]["forwards"]["model"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["bytes_reward"] > 0
    trained = ("commonsense_qa", "gsm8k")  # the prompts reward-data drew above
    assert summary["router_trained_on"] == ",".join(trained) and summary["transfer"] is False
    # a threshold calibrated on another task's calib answers (humaneval's rows): those ids are
    # used, never evaluated on, but the head learned from other tasks, so a run there is transfer
    there = tmp_path / "there.json"
    there.write_text(json.dumps({**c, "example_ids": ["HumanEval/0"]}))
    args = {"checkpoint": str(ck), "target_share": 0.5}
    moved = get_router("reward", {**args, "calibration": str(there)})
    assert "HumanEval/0" in moved.used_example_ids() and moved.trained_on() == trained

    # evaluating on the calib examples the threshold was calibrated on is refused
    again = [*run[: run.index("--limit")], "--split", "calib", "--limit", "2"]
    assert main([*again, "--out", str(tmp_path / "r2"), *pair]) == 2
    assert "trained/calibrated on 2 of these 2 examples" in capsys.readouterr().err


def test_llamacpp_reward_backbone_matches_transformers(tmp_path, monkeypatch):
    """A head-only checkpoint on a GGUF backbone runs on llama.cpp beside a llama.cpp small model:
    a truncated GGUF of the backbone's layers gives the transformers reward model's scores (F32
    tiny model; llama.cpp's KV cache is f16), incrementally with crops too, and batches."""
    from harness.backends.engine import Engine
    from harness.backends.reward_model import (
        LlamaCppRewardBackend,
        load_llamacpp_reward_backend,
        reward_backend_for,
        save_checkpoint,
    )
    from harness.core.scheduler import Job, generate_many
    from tests.tiny import tiny_gguf_pair, tiny_pair, tiny_tokenizer

    monkeypatch.setenv("HYBRIDBENCH_CACHE", str(tmp_path / "cache"))
    gguf = tiny_gguf_pair()[0]
    hf_small = tiny_pair()[0]
    hf_small.model.layers = hf_small.model.layers[:2]
    hf_small.config.num_hidden_layers = 2
    model = RewardModel(hf_small.model).eval()
    with torch.no_grad():
        model.head.weight.normal_(0, 1, generator=torch.Generator().manual_seed(1))
    path = tmp_path / "reward.pt"
    save_checkpoint(path, model, str(gguf))
    rb = load_llamacpp_reward_backend(path, threads=1, n_ctx=512)
    assert isinstance(rb, LlamaCppRewardBackend) and rb.info.backend.startswith("llama.cpp")
    want = torch.tensor(token_scores(model, [], PROMPT))
    got = rb.forward(PROMPT, len(PROMPT))[0][:, 0]
    torch.testing.assert_close(got, want, atol=0.02, rtol=0)
    # the graph stopped at the final norm: the vocabulary projection was never computed, and the
    # hidden states are bit for bit those of the same GGUF computed to the end
    from harness.backends import models
    from harness.backends.llamacpp import LlamaCppBackend

    assert rb.inner.stops > 0 and rb.inner.forward(PROMPT[:3], 1, True)[0].shape == (1, 0)
    rb.inner.crop(0)
    trunc = models.truncated_gguf(str(gguf), 2)
    full = LlamaCppBackend(trunc, rb.info, threads=1, n_ctx=512)
    h_full = full.forward(PROMPT, len(PROMPT), hidden=True)[1]
    assert full.stops == 0 and torch.equal(rb.forward(PROMPT, len(PROMPT), True)[1], h_full)
    from harness.backends.llamacpp import gguf_info

    everything = gguf_info(trunc, "reward", "x").weight_bytes
    assert rb.info.weight_bytes < everything  # output.weight is not read
    # an MLP head runs on llama.cpp too (applied to the same hidden states here)
    mlp_model = RewardModel(hf_small.model, head="mlp").eval()
    save_checkpoint(tmp_path / "mlp.pt", mlp_model, str(gguf))
    rb_mlp = load_llamacpp_reward_backend(tmp_path / "mlp.pt", threads=1, n_ctx=512)
    torch.testing.assert_close(
        rb_mlp.forward(PROMPT, len(PROMPT))[0][:, 0],
        torch.tensor(token_scores(mlp_model, [], PROMPT)),
        atol=0.02,
        rtol=0,
    )
    rb.crop(5)  # incremental after a crop equals the full pass
    torch.testing.assert_close(rb.forward(PROMPT[5:], 3)[0][:, 0], got[-3:], atol=1e-4, rtol=0)
    # beside a llama.cpp small model it is the backend the router gets (2 of the tiny small
    # model's 3 layers: a truncated GGUF; all of them: `SmallHead`, below), and it batches
    backends = tiny_backends(kind="llama.cpp", n_seq=2)
    engine = Engine(tiny_tokenizer(), backends)
    engine.add("reward", reward_backend_for(path, engine))
    assert isinstance(engine.backends["reward"], LlamaCppRewardBackend)
    router = get_router("reward", {"threshold": float(want.median())})
    cfg = DecodeConfig(max_new_tokens=12)
    one = generate(engine.backends, router, PROMPT, cfg)
    jobs = [Job(i, PROMPT[: 8 + i], cfg) for i in range(3)]
    many = {j.key: g for j, g in generate_many(engine.slots(2), router, jobs)}
    assert 0 < sum(one.provenance) < len(one.provenance)  # keeps some, defers some
    for j in jobs:
        alone = generate(engine.backends, router, j.prompt_ids, cfg)
        assert many[j.key].token_ids == alone.token_ids


@pytest.mark.parametrize("kind", ["hf", "llama.cpp"])
def test_reward_head_on_all_of_small_reads_small_own_pass(tmp_path, kind):
    """A head-only checkpoint whose backbone is all of small: no second model runs. Its scores
    are the head over small's last hidden states after each drafted token, from small's pass
    over the draft, which the next draft reuses when the token is kept; decisions equal those of
    the same checkpoint run as a separate reward model, and the only small passes beyond
    small-only's are one per deferred token."""
    from harness.backends.engine import Engine
    from harness.backends.reward_model import SmallHead, reward_backend_for, save_checkpoint
    from harness.core.scheduler import Job, generate_many
    from tests.tiny import tiny_pair, tiny_tokenizer

    hf_small = tiny_pair()[0]
    model = RewardModel(hf_small.model).eval()  # all (3) layers of the tiny small model
    with torch.no_grad():
        model.head.weight.normal_(0, 1, generator=torch.Generator().manual_seed(1))
    backends = tiny_backends(kind=kind, n_seq=2) if kind == "llama.cpp" else tiny_backends()
    engine = Engine(tiny_tokenizer(), backends)
    source = engine.backends["small"].info.source  # the GGUF path, or the tiny model's name
    path = tmp_path / "reward.pt"
    save_checkpoint(path, model, source)
    shared = reward_backend_for(path, engine)
    assert isinstance(shared, SmallHead) and shared.info.kv_bytes_per_token == 0
    threshold = float(torch.tensor(token_scores(model, [], PROMPT)).median())
    router = get_router("reward", {"threshold": threshold})
    cfg = DecodeConfig(max_new_tokens=14)
    separate = {
        **engine.backends,
        "reward": RewardBackend(model, model_info(model, "x", "float32")),
    }
    # calibration scores tokens through small's own pass: the separate model's scores
    rm = separate["reward"]
    for m in (shared, rm):
        m.reset()
    tol = 0.02 if kind == "llama.cpp" else 1e-4  # llama.cpp: F32 weights, f16 KV cache
    torch.testing.assert_close(
        shared.forward(PROMPT, 5)[0], rm.forward(PROMPT, 5)[0], atol=tol, rtol=0
    )
    shared.reset()
    engine.add("reward", shared)
    small_only = generate(engine.backends, get_router("small"), PROMPT, cfg)
    for prompt in (PROMPT, PROMPT[:9]):
        want = generate(separate, router, prompt, cfg)
        got = generate(engine.backends, router, prompt, cfg)
        assert (got.token_ids, got.provenance) == (want.token_ids, want.provenance)
        assert 0 < sum(got.provenance) < len(got.provenance)
        assert not [f for f in got.forwards if f.model == "reward"]
        small_passes = [f for f in got.forwards if f.model == "small" and f.phase != "prefill"]
        deferred = sum(s.large_tokens for s in got.steps)
        # each step: one pass over the draft (score); a deferred draft costs small one more pass
        # to read large's token; a kept one is the next draft's pass (reused, no pass)
        assert len(small_passes) == len(got.steps) + deferred - (got.provenance[-1] == 1)
    assert (
        len([f for f in small_only.forwards if f.phase != "prefill"]) == len(small_only.steps) - 1
    )
    if kind == "llama.cpp":  # batched equals one at a time
        jobs = [Job(i, PROMPT[: 8 + i], cfg) for i in range(3)]
        many = {j.key: g for j, g in generate_many(engine.slots(2), router, jobs)}
        for j in jobs:
            alone = generate(engine.backends, router, j.prompt_ids, cfg)
            assert many[j.key].token_ids == alone.token_ids


def test_full_responses_use_each_tasks_budget_and_stops(models):
    """reward-data --max-new-tokens 0: each prompt's responses get its task's own budget and
    stop strings, as `hybridbench run --task T` decodes them."""
    from harness.backends.engine import Engine
    from harness.training.reward_data import _plan
    from tasks import get_task
    from tests.tiny import tiny_tokenizer

    engine = Engine(tiny_tokenizer(), models)
    for name in ("mbpp", "gsm8k"):
        task = get_task(name)
        ex = task.split("train")[0]
        _, jobs, _ = _plan(engine, name, ex, SynthConfig(max_new_tokens=0))
        assert [j.cfg.max_new_tokens for j in jobs] == [task.max_new_tokens] * 2
        assert all(j.cfg.stop == tuple(task.stop) for j in jobs)
        _, jobs, _ = _plan(engine, name, ex, SynthConfig(max_new_tokens=9))
        assert [(j.cfg.max_new_tokens, j.cfg.stop) for j in jobs] == [(9, ())] * 2


def test_features_resume_after_an_interruption(tmp_path, monkeypatch):
    """Features are computed FEATURE_BLOCK prompts at a time and saved; a run killed part-way
    resumes from the saved blocks and ends with the features an uninterrupted run computes."""
    from harness.training import reward as tr

    records = [{"id": f"t/{i}"} for i in range(7)]
    calls = []

    def fake(model, block):  # one pair per prompt, its feature the prompt's number
        calls.append([r["id"] for r in block])
        x = torch.tensor([[float(r["id"][2:])] * 2 for r in block])
        n = len(block)
        return Pairs(x, -x, torch.arange(1, n + 1), tuple(r["id"] for r in block)), n

    monkeypatch.setattr(tr, "FEATURE_BLOCK", 3)
    monkeypatch.setattr(tr, "pair_features", fake)
    want, want_ties = tr._features(None, records, {"k": 1}, tmp_path / "a.pt")
    assert len(calls) == 3 and want_ties == 7 and want.prompt == tuple(r["id"] for r in records)

    def dies_on_the_second_block(model, block):
        if calls:
            raise KeyboardInterrupt
        return fake(model, block)

    calls.clear()
    monkeypatch.setattr(tr, "pair_features", dies_on_the_second_block)
    with pytest.raises(KeyboardInterrupt):
        tr._features(None, records, {"k": 1}, tmp_path / "b.pt")
    assert [f.name for f in (tmp_path / "b").iterdir()] == ["00000.pt"]  # the first block
    calls.clear()
    monkeypatch.setattr(tr, "pair_features", fake)
    got, ties = tr._features(None, records, {"k": 1}, tmp_path / "b.pt")
    assert calls == [["t/3", "t/4", "t/5"], ["t/6"]]  # the first block was not computed again
    assert ties == want_ties and got.prompt == want.prompt
    for f in ("chosen", "rejected", "length"):
        assert torch.equal(getattr(got, f), getattr(want, f))
    # other settings (another key) or other prompts do not resume someone else's blocks
    calls.clear()
    tr._features(None, records, {"k": 2}, tmp_path / "b.pt")
    assert len(calls) == 3
    calls.clear()
    tr._features(None, records[1:], {"k": 2}, tmp_path / "b.pt")
    assert len(calls) == 2  # both blocks now hold other prompts than the saved ones


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("batch", [1, 3])
def test_reward_data_stops_large_at_smalls_length_with_the_same_records(
    tmp_path, monkeypatch, kind, batch
):
    """Large decodes no further than small's response (the chunks use nothing past it): the
    file equals one made from full responses, cut where the record says, and large's capped
    jobs decode fewer tokens. Batched (3 slots), some large jobs start before their small one
    has ended and run uncapped: the records are the same."""
    from harness.backends.engine import Engine
    from harness.training import reward_data as rd
    from tasks.base import Example, user_message
    from tests.tiny import tiny_tokenizer

    # one token in eight ends a response, so that the tiny models' lengths vary
    monkeypatch.setattr(Engine, "eos_ids", property(lambda self: tuple(range(0, 128, 8))))
    models = tiny_backends(kind=kind, n_seq=batch)
    engine = Engine(tiny_tokenizer(), {k: models[k] for k in ("small", "large")})
    engine.batch = batch
    cfg = SynthConfig(max_new_tokens=40, chunks=6, seed=1)
    prompts = [
        ("toy", Example(f"toy/{i}", user_message(f"What is {i}+{i}?"), "")) for i in range(8)
    ]
    full = []  # each response decoded to its own end, then cut as the record says
    for _, ex in prompts:
        head, jobs, rng = rd._plan(engine, "toy", ex, cfg)
        gens = {j.key[1]: engine.generate(j.router, j.prompt_ids, j.cfg) for j in jobs}
        full.append(rd._finish(head, gens, cfg, rng))
    budgets = []
    many = engine.generate_many

    def spy(router, jobs, batch=None):
        for job, gen in many(router, jobs, batch):
            budgets.append((job.key[1], job.cfg.max_new_tokens, len(gen.token_ids)))
            yield job, gen

    monkeypatch.setattr(engine, "generate_many", spy)
    rd.synthesize(engine, prompts, cfg, tmp_path / "pairs.jsonl")
    got = {r["id"]: r for r in rd.read_pairs(tmp_path / "pairs.jsonl")}
    assert [got[r["id"]] for r in full] == json.loads(json.dumps(full))
    smalls = {r["id"]: len(r["small"]["ids"]) for r in full}
    assert len(set(smalls.values())) > 2  # lengths vary
    capped = [b for role, b, _ in budgets if role == "large" and b < cfg.max_new_tokens]
    assert len(capped) >= (8 if batch == 1 else 1)  # one slot: every small ends before its large
    assert all(n <= b for _, b, n in budgets)
    cut = [r for r in full if r["large"]["stop_reason"] == rd.SMALLS_LENGTH]
    assert cut and all(len(r["large"]["ids"]) == len(r["small"]["ids"]) for r in cut)
    for r in full:
        n = min(len(r["small"]["ids"]), len(r["large"]["ids"]))
        assert all(c["length"] <= n for c in r["chunks"])
    assert synthesize_one(engine, *prompts[0], cfg) == full[0]


def test_reward_data_decodes_each_block_small_then_large():
    from harness.training.reward_data import job_order

    pairs = [[f"{p}.small", f"{p}.large"] for p in "abc"]
    assert job_order(pairs, 2) == ["a.small", "b.small", "a.large", "b.large", "c.small", "c.large"]
    assert job_order(pairs, 1) == ["a.small", "a.large", "b.small", "b.large", "c.small", "c.large"]
    assert sorted(job_order(pairs, 32)) == sorted(j for js in pairs for j in js)


def test_read_pairs_takes_the_compressed_file(tmp_path):
    """A preference-data folder kept with pairs.jsonl.gz reads as the plain file it was, and the
    plain file is back in place (resuming appends to it, training hashes its bytes)."""
    import gzip

    from harness.training.reward_data import read_pairs

    lines = "".join(json.dumps({"id": f"toy/{i}", "chunks": []}) + "\n" for i in range(3))
    (tmp_path / "pairs.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    rows = read_pairs(tmp_path / "pairs.jsonl")
    assert [r["id"] for r in rows] == ["toy/0", "toy/1", "toy/2"]
    assert (tmp_path / "pairs.jsonl").read_text() == lines
