"""lm-eval drives the hybrid core: the `hybrid` model through lm-eval's API, and the CLI wrapper."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from harness.backends.engine import Engine  # noqa: E402
from harness.core.loop import DecodeConfig  # noqa: E402
from harness.errors import UserError  # noqa: E402
from harness.evaluation.lmeval import REFUSE_LOGLIKELIHOOD, register  # noqa: E402
from routers import get_router  # noqa: E402
from tests.tiny import save_tiny_pair, tiny_backends, tiny_tokenizer  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="module")
def engine():
    return Engine(tiny_tokenizer(), tiny_backends())


def _requests(contexts, gen_kwargs):
    from lm_eval.api.instance import Instance

    return [
        Instance("generate_until", {}, (c, dict(gen_kwargs)), i) for i, c in enumerate(contexts)
    ]


def test_registered_without_hiding_builtin_models():
    from lm_eval.api.registry import get_model

    cls = register()
    assert get_model("hybrid") is cls
    assert get_model("dummy").__name__ == "DummyLM"  # lm-eval's own models are still there


def test_generate_until_routes_through_the_core(engine):
    lm = register()(router="oracle", engine=engine)
    contexts = [
        engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in ("2+2?", "hello")
    ]
    out = lm.generate_until(_requests(contexts, {"until": [], "max_gen_toks": 12}))
    assert len(out) == 2
    for ctx, text in zip(contexts, out, strict=True):
        ids = engine.tokenizer(ctx)["input_ids"]
        cfg = DecodeConfig(max_new_tokens=12)
        assert text == engine.generate(get_router("oracle"), ids, cfg).text
        # oracle at temperature 0 is large's greedy output
        assert text == engine.generate(get_router("large"), ids, cfg).text
    # lm-eval's `until` strings end the completion before the stop string
    stop = out[0][3:5]
    cut = lm.generate_until(_requests(contexts[:1], {"until": [stop], "max_gen_toks": 12}))[0]
    assert stop not in cut and out[0].startswith(cut) and len(cut) <= 3


def test_router_args_come_from_model_args(engine):
    lm = register()(router="random", p=0.25, engine=engine)
    assert lm.router.describe() == {"p": 0.25}
    with pytest.raises(UserError, match="has no argument q"):
        register()(router="random", q=1, engine=engine)


def test_loglikelihood_is_refused_with_a_reason(engine):
    lm = register()(router="small", engine=engine)
    with pytest.raises(UserError) as e:
        lm.loglikelihood([])
    assert str(e.value) == REFUSE_LOGLIKELIHOOD and "generate_until" in str(e.value)


def test_unknown_generation_arguments_are_a_user_error(engine):
    lm = register()(router="small", engine=engine)
    with pytest.raises(UserError, match="top_k"):
        lm.decode_config({"until": [], "top_k": 5})
    cfg = lm.decode_config({"until": "Q:", "do_sample": False, "temperature": 0.7})
    assert cfg.stop == ("Q:",) and cfg.temperature == 0.0 and cfg.max_new_tokens == 256


def test_cli_runs_lm_eval_offline_on_the_projects_prompts(tmp_path, engine):
    """`hybridbench lm-eval` end to end: local data, the project's prompt, per-sample scores."""
    from harness.cli.main import main
    from tasks import get_task

    small, large = save_tiny_pair(tmp_path / "pair")
    out = tmp_path / "out"
    model_args = f"router=oracle,small={small},large={large},dtype=float32,threads=1"
    rc = main(
        [
            "lm-eval",
            "--model",
            "hybrid",
            "--model_args",
            model_args,
            "--tasks",
            "gsm8k_hybridbench",
            "--limit",
            "2",
            "--apply_chat_template",
            "--gen_kwargs",
            "max_gen_toks=6",
            "--output_path",
            str(out),
            "--log_samples",
        ]
    )
    assert rc == 0
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    assert "exact_match,flexible-extract" in results["gsm8k_hybridbench"]
    samples = [json.loads(x) for x in next(out.rglob("samples_*.jsonl")).read_text().splitlines()]
    task = get_task("gsm8k")
    examples = {ex.id: ex for ex in task.split("test")[:2]}
    # one sample per example and filter; lm-eval's filters are the project's two scores
    by_filter = {"strict-match": "exact_match_strict", "flexible-extract": "exact_match_flexible"}
    assert sorted((s["filter"], s["doc_id"]) for s in samples) == sorted(
        (f, i) for f in by_filter for i in range(2)
    )
    for s in samples:
        ex = examples[f"gsm8k/test/{s['doc']['id']}"]
        context = s["arguments"]["gen_args_0"]["arg_0"]
        # the prompt lm-eval built is, token for token, the one `hybridbench run` decodes
        assert engine.tokenizer(context)["input_ids"] == engine.encode(ex.messages)
        # lm-eval's score of the completion equals the project's scorer on the same text
        assert s["exact_match"] == task.score(ex, s["resps"][0][0])[by_filter[s["filter"]]]


def test_lm_eval_rejects_its_include_path():
    from harness.cli.main import main

    assert main(["lm-eval", "--include_path", "/x", "--tasks", "gsm8k"]) == 2


def test_paths_are_written_at_run_time(tmp_path):
    from harness.evaluation.lmeval import write_tasks

    names = write_tasks(tmp_path)
    assert set(names) == {"gsm8k", "gsm8k_hybridbench"}
    text = (tmp_path / "gsm8k_hybridbench.yaml").read_text()
    assert "${" not in text and str(tmp_path) in text
    include = text.split("include: ")[1].split("\n")[0]
    assert Path(include).is_file()
