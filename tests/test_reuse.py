"""Query routers reusing small-only / large-only answers (`run --reuse-answers`): a query
router's answer IS small's or large's greedy answer, so decoding it again is waste; the reused
row must equal the decoded one in everything but timing."""

from __future__ import annotations

import json

import pytest

from harness.cli import sweep as sweep_command
from harness.cli.main import main
from harness.core.loop import DecodeConfig
from harness.core.scheduler import Job, generate, generate_many
from routers import get_router
from tests.test_batching import PROMPTS
from tests.test_query import save_query
from tests.tiny import BACKENDS, save_tiny_pair, tiny_backends


def shape(g):
    """Everything about a generation but its timers."""
    fw = [(f.model, f.phase, f.tokens_in, f.cache_len) for f in g.forwards]
    st = [(s.drafted, s.kept, s.large_tokens, s.large_called) for s in g.steps]
    return (g.prompt_ids, g.token_ids, g.text, g.provenance, g.stop_reason, g.query_route, fw, st)


@pytest.mark.parametrize("kind", BACKENDS)
def test_reused_answers_equal_decoded_ones(kind):
    models = tiny_backends(kind=kind)
    cfg = DecodeConfig(max_new_tokens=9)
    router = get_router("random_query", {"p": 0.5})
    answers = {
        i: {r: generate(models, get_router(r), p, cfg) for r in ("small", "large")}
        for i, p in enumerate(PROMPTS)
    }
    decoded = {i: generate(models, router, p, cfg) for i, p in enumerate(PROMPTS)}
    assert {g.query_route for g in decoded.values()} == {"small", "large"}
    jobs = [Job(i, p, cfg, answers=answers[i]) for i, p in enumerate(PROMPTS)]
    reused = {j.key: g for j, g in generate_many([models], router, jobs)}
    for i, g in decoded.items():
        assert shape(reused[i]) == shape(g), i
        route = answers[i][g.query_route]
        # small's route continues from the routing prefill: one small prefill, no re-read
        assert g.forwards[0].phase == "prefill" and g.forwards[0].tokens_in == len(PROMPTS[i])
        tail = route.forwards[1:] if g.query_route == "small" else route.forwards
        assert shape(g)[6][1:] == [(f.model, f.phase, f.tokens_in, f.cache_len) for f in tail]
        # only the routing pass ran: seconds are its own plus the answer's
        assert reused[i].seconds >= reused[i].forwards[0].seconds


def test_an_answer_to_another_prompt_is_refused():
    models = tiny_backends()
    cfg = DecodeConfig(max_new_tokens=4)
    small = generate(models, get_router("small"), PROMPTS[1], cfg)
    job = Job(0, PROMPTS[0], cfg, answers={"small": small, "large": small})
    ((_, out),) = list(generate_many([models], get_router("random_query", {"p": 0.5}), [job]))
    assert isinstance(out, ValueError) and "prompt" in str(out)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    small, large = save_tiny_pair(root / "m")
    return root, ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]


def run_cmd(out, router, models, *extra):
    argv = ["run", "--task", "gsm8k", "--router", router, "--limit", "4", "--max-new-tokens", "5"]
    return main([*argv, *extra, *models, "--out", str(out)])


def records(folder):
    rows = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
    return {r["example_id"]: r for r in rows}


def test_run_reuse_answers_equals_decoding(pair, tmp_path):
    root, models = pair
    for r in ("small", "large"):
        assert run_cmd(root / r, r, models) == 0
    # query: a classifier that sends every prompt one way would test one route only; random_query
    # at p = 0.5 sends these 4 prompts both ways (seeded per prompt)
    q = ["--router-arg", "p=0.5"]
    assert run_cmd(tmp_path / "decoded", "random_query", models, *q) == 0
    reuse = ["--reuse-answers", f"{root / 'small'},{root / 'large'}"]
    assert run_cmd(tmp_path / "reused", "random_query", models, *q, *reuse) == 0
    want, got = records(tmp_path / "decoded"), records(tmp_path / "reused")
    assert sorted(got) == sorted(want)
    routes = set()
    for key, w in want.items():
        g = got[key]
        routes.add(g["generation"]["query_route"])
        assert (g["completion"], g["scores"]) == (w["completion"], w["scores"])
        for field in ("token_ids", "provenance", "stop_reason", "query_route", "steps"):
            if field == "steps":
                g["generation"][field].pop("seconds"), w["generation"][field].pop("seconds")
            assert g["generation"][field] == w["generation"][field], (key, field)
        gf, wf = g["generation"]["forwards"], w["generation"]["forwards"]
        assert {k: v for k, v in gf.items() if k != "seconds"} == {
            k: v for k, v in wf.items() if k != "seconds"
        }
    assert routes == {"small", "large"}
    manifest = json.loads((tmp_path / "reused" / "manifest.json").read_text())
    (session,) = manifest["sessions"]
    assert session["reused"]["examples"] == 4 and session["reused"]["seconds"] > 0
    assert session["wall_s"] == pytest.approx(
        session["measured_wall_s"] + session["reused"]["seconds"], abs=2e-3
    )
    summary = json.loads((tmp_path / "reused" / "summary.json").read_text())
    assert summary["throughput_modeled"] is True
    decoded = json.loads((tmp_path / "decoded" / "summary.json").read_text())
    assert decoded["throughput_modeled"] is False
    for k in ("quality", "large_token_share", "query_large_share", "bytes_total"):
        assert summary[k] == decoded[k], k


def test_run_reuse_answers_refusals(pair, tmp_path, capsys):
    root, models = pair
    for r in ("small", "large"):
        run_cmd(root / r, r, models)
    reuse = f"{root / 'small'},{root / 'large'}"
    cases = [
        (["--router", "random"], reuse, "query routers"),
        (["--temperature", "0.7"], reuse, "greedy"),
        (["--max-new-tokens", "6"], reuse, "decode"),
        ([], f"{root / 'large'},{root / 'small'}", "not a small one"),
        ([], str(root / "small"), "SMALL_RUN,LARGE_RUN"),
        ([], f"{root / 'small'},{tmp_path}", "is not a run folder"),
    ]
    for i, (extra, spec, message) in enumerate(cases):
        router = extra[1] if extra[:1] == ["--router"] else "random_query"
        extra = extra[2:] if extra[:1] == ["--router"] else extra
        out = tmp_path / f"r{i}"
        argv = ["run", "--task", "gsm8k", "--router", router, "--router-arg", "p=0.5"]
        argv += ["--limit", "4", "--max-new-tokens", "5", *extra, *models, "--out", str(out)]
        assert main([*argv, "--reuse-answers", spec]) == 2, message
        assert message in capsys.readouterr().err, message


def test_sweep_passes_reuse_answers_to_query_routers_only(tmp_path):
    import argparse

    from harness.evaluation import sweep

    p = argparse.ArgumentParser()
    sweep_command.configure(p)
    args = p.parse_args(
        ["--task", "gsm8k", "--routers", "random,random_query,oracle", "--targets", "0.2"]
        + ["--out", "x"]
        + ["--reuse-answers", "a,b"]
    )
    jobs = {j.router: j.argv for j in sweep.plan_rows(sweep_command.spec_of(args), tmp_path)}
    assert "--reuse-answers" in jobs["random_query"] and "--reuse-answers" not in jobs["random"]
    assert "--reuse-answers" in jobs["oracle"]
    i = jobs["random_query"].index("--reuse-answers")
    assert jobs["random_query"][i + 1] == f"{(tmp_path.cwd() / 'a')},{(tmp_path.cwd() / 'b')}"


def test_query_classifier_reuse(pair, tmp_path):
    """The trained query router reuses too (its route comes from small's prefill feature)."""
    root, models = pair
    for r in ("small", "large"):
        run_cmd(root / r, r, models)
    path = save_query(tmp_path / "q.pt", bias=0.0, hidden=48, share=1.0)  # every prompt: large
    q = ["--router-arg", f"path={path}"]
    argv = ["run", "--task", "gsm8k", "--router", "query", "--limit", "4", "--max-new-tokens", "5"]
    reuse = ["--reuse-answers", f"{root / 'small'},{root / 'large'}"]
    assert main([*argv, *q, *reuse, *models, "--out", str(tmp_path / "q")]) == 0
    got, large = records(tmp_path / "q"), records(root / "large")
    assert all(g["completion"] == large[k]["completion"] for k, g in got.items())


# --- the oracle, replayed along large's answers (harness/evaluation/replay.py) ---------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_replayed_oracle_equals_decoded_oracle(kind):
    """Provenance, steps and forwards of the oracle replayed from large's answers and one
    teacher-forced small pass equal decoding the oracle, also where an answer ends at EOS."""
    from harness.backends.engine import Engine
    from harness.evaluation.replay import oracle_generations
    from tests.tiny import tiny_tokenizer

    engine = Engine(tiny_tokenizer(), tiny_backends(kind=kind))
    first = generate(
        engine.backends, get_router("large"), PROMPTS[0], DecodeConfig(max_new_tokens=8)
    )
    oracle = get_router("oracle")
    for cfg in (
        DecodeConfig(max_new_tokens=12),
        DecodeConfig(max_new_tokens=12, eos_ids=(first.token_ids[4],)),
    ):
        decoded = {
            i: generate(engine.backends, oracle, p, cfg, engine.decode)
            for i, p in enumerate(PROMPTS)
        }
        jobs = [
            Job(
                i, p, cfg, answers={"large": generate(engine.backends, get_router("large"), p, cfg)}
            )
            for i, p in enumerate(PROMPTS)
        ]
        reuse = {"mode": "oracle"}
        got = {j.key: g for j, g in oracle_generations(engine, oracle, jobs, reuse)}
        assert reuse["spent"] > 0
        for i, g in decoded.items():
            assert not isinstance(got[i], Exception), got[i]
            assert shape(got[i]) == shape(g), (i, cfg)
            assert got[i].seconds > 0 and got[i].ttft <= got[i].seconds  # modeled clock
        assert any(sum(g.provenance) for g in decoded.values())  # the oracle defers somewhere
        assert any(0 in g.provenance for g in decoded.values())
    assert "eos" in {g.stop_reason for g in decoded.values()}


def test_run_oracle_reuse_answers(pair, tmp_path):
    root, models = pair
    for r in ("small", "large"):
        run_cmd(root / r, r, models)
    assert run_cmd(tmp_path / "decoded", "oracle", models) == 0
    reuse = ["--reuse-answers", f"{root / 'small'},{root / 'large'}"]
    assert run_cmd(tmp_path / "replayed", "oracle", models, *reuse) == 0
    want, got = records(tmp_path / "decoded"), records(tmp_path / "replayed")
    for key, w in want.items():
        g = got[key]
        assert (g["completion"], g["scores"]) == (w["completion"], w["scores"])
        for field in ("token_ids", "provenance", "stop_reason"):
            assert g["generation"][field] == w["generation"][field], (key, field)
    summary = json.loads((tmp_path / "replayed" / "summary.json").read_text())
    decoded = json.loads((tmp_path / "decoded" / "summary.json").read_text())
    assert summary["throughput_modeled"] is True
    for k in ("quality", "large_token_share", "large_call_share", "bytes_total"):
        assert summary[k] == decoded[k], k
    (session,) = json.loads((tmp_path / "replayed" / "manifest.json").read_text())["sessions"]
    assert session["reused"]["examples"] == 4
    assert session["wall_s"] == pytest.approx(
        session["measured_wall_s"] - session["reused"]["spent_s"] + session["reused"]["seconds"],
        abs=3e-3,
    )
    # the oracle replays with one drafted token per step only
    argv = ["--router-arg", "draft_len=2", *reuse]
    assert run_cmd(tmp_path / "k2", "oracle", models, *argv) == 2


ROWS = {
    "small": {},
    "large": {},
    "random": {"p": 0.4},
    "speculative": {"k": 4},
    # pass costs under which speculating stops paying off at times: steps of large alone
    "speculative-adaptive": {
        "adaptive": True,
        "costs": {"small": {1: 0.01, 64: 0.3}, "large": {1: 0.011, 64: 0.05}},
    },
}


@pytest.mark.parametrize("row", list(ROWS))
def test_timed_replay_repeats_a_recorded_rows_passes(row):
    """`replay_timed` (recorded rows timed on a GPU): a recorded row decoded again over models of the
    same shape but other weights makes the same passes of the same sizes, EOS stops included."""
    from harness.evaluation.replay import replay_timed

    models, shadows = tiny_backends(seed=2), tiny_backends(seed=5)
    router = lambda: get_router(row.split("-")[0], ROWS[row])  # noqa: E731
    free = generate(models, router(), PROMPTS[0], DecodeConfig(max_new_tokens=40))
    # end tokens: one the row emits early; and 33, on which speculative decoding with k = 4
    # accepts an end token small drafted, then drops large's bonus token after it
    fw = lambda g: [(f.model, f.phase, f.tokens_in, f.cache_len) for f in g.forwards]  # noqa: E731
    stops = set()
    for end in (None, free.token_ids[5], 33):
        cfg = DecodeConfig(max_new_tokens=40, eos_ids=() if end is None else (end,))
        for p in PROMPTS:
            rec = generate(models, router(), p, cfg)
            again = replay_timed(shadows, rec.to_json(), end, 40, "spec" in row, lambda: 0.0)
            assert fw(again) == fw(rec)
            assert again.stop_reason == rec.stop_reason
            stops.add(rec.stop_reason)
    assert stops == {"eos", "max_tokens"}
