"""`hybridbench bench-gpu --tiny` on the CPU: every section runs and writes its rows (speed is
not asserted: the GPU figures come from the same command on a GPU)."""

from __future__ import annotations

import json

from harness.cli.main import main
from harness.evaluation.gpu_bench import ROUTERS


def test_bench_gpu_tiny_runs_every_section(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench-gpu", "--tiny", "--device", "cpu", "--out", str(out), "--threads", "1"]
    assert main([*argv, "--batches", "1,3", "--new-tokens", "3", "--seeds-tokens", "3"]) == 0
    result = json.loads(out.read_text())
    assert result["skipped"] == [] and result["settings"]["batches"] == [1, 3]
    rows = result["rows"]
    hf = [r for r in rows if r["setting"].startswith("transformers generate")]
    assert {(r["B"], r["config"]) for r in hf} >= {(1, "eager"), (4, "eager")}
    settings = {r["setting"] for r in rows} - {hf[0]["setting"]}
    assert "core hf" in settings and any(s.startswith("seeds: small") for s in settings)
    if result["llama.cpp"] == "available":  # installed with the test extra: on the CPU here
        assert "core llama.cpp (q8_0)" in settings
    for setting in settings:
        mine = [r for r in rows if r["setting"] == setting]
        batches = {1, 3} if setting.startswith("core") else {1, 2}
        assert {(r["B"], r["config"]) for r in mine} == {
            (b, name) for b in batches for name, _, _ in ROUTERS
        }
        for r in mine:
            assert r["tokens"] == r["B"] * 3 and r["tok_s"] > 0 and 0 < r["passes_s"] <= r["wall_s"]
            # one cost model for every router: its own passes, each at the one-token step
            assert r["cost_model_tok_s"] > 0 and r["measured_over_cost_model"] > 0
            counted = sum(n for sizes in r["passes_by_size"].values() for n in sizes.values())
            bucketed = sum(v["passes"] for m in r["feed_buckets"].values() for v in m.values())
            assert counted == bucketed > 0 and set(r["passes_by_size"]) <= {"small", "large"}
        shares = {r["config"]: r["large_token_share"] for r in mine}
        assert shares["small-only"] == 0 and shares["large-only"] == 1
    assert isinstance(result["entropy_threshold"], float) and "memory_B3" in result
    printed = capsys.readouterr().out
    assert "| core hf | 3 | random p=0.2 |" in printed
    assert "| core hf | 3 | speculative k=4 | 1: " in printed  # passes by feed bucket
    assert main(["bench-gpu", "--from-json", str(out)]) == 0
    again = capsys.readouterr().out  # the same tables, from the JSON alone
    assert again.strip() and printed.rstrip().endswith(again.rstrip())


def test_bench_gpu_runs_only_the_sections_asked_for(tmp_path):
    out = tmp_path / "bench.json"
    argv = ["bench-gpu", "--tiny", "--device", "cpu", "--out", str(out), "--threads", "1"]
    assert main([*argv, "--batches", "2", "--new-tokens", "2", "--sections", "core"]) == 0
    result = json.loads(out.read_text())
    assert result["settings"]["sections"] == ["core"]
    assert {r["setting"] for r in result["rows"]} == {"core hf"}
    assert {r["B"] for r in result["rows"]} == {2}


def test_bench_gpu_refuses_an_unknown_section(tmp_path, capsys):
    argv = ["bench-gpu", "--tiny", "--device", "cpu", "--out", str(tmp_path / "b.json")]
    assert main([*argv, "--sections", "core,warp"]) == 2
    assert (
        "--sections: warp; choose from generate, core, llama.cpp, seeds" in capsys.readouterr().err
    )


def test_the_gpu_tables_in_the_speed_doc_are_made_from_their_json():
    from pathlib import Path

    from harness.evaluation.gpu_bench import table

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "speed.md").read_text()
    for name in ("bench-gpu-h100.json", "bench-gpu-h100-core.json"):
        result = json.loads((root / "docs" / "data" / name).read_text())
        assert f"(data/{name})" in doc
        assert table(result) in doc


def test_graph_captures_and_failures_are_reported():
    """Before each batch size's rows every static pass's graph is captured; where one cannot be
    (here: no CUDA) each shape's failure is kept with its reason, the passes run eagerly, and
    the details table says so."""
    import torch

    from harness.evaluation import gpu_bench, random_pair

    cfgs = {
        r: random_pair.model_config(random_pair.TINY_SHAPES[r], random_pair.TINY_COMMON)
        for r in ("small", "large")
    }
    backends = {}
    for i, role in enumerate(("small", "large")):
        model = random_pair.random_model(cfgs[role], "cpu", torch.float32, i)
        backends[role] = random_pair.hf_backend(model, role, 64)
        backends[role].step = "graph"
    s = gpu_bench.Settings("cpu", torch.float32, 8, 4, (2,), (1,), (1,), 4, 1, 60.0)
    captured = gpu_bench.warm(backends, 2, s, 4)
    for role in ("small", "large"):
        failures = captured[role]["failures"]
        assert captured[role]["graphs_by_feed"] == {} and len(failures) > 1
        assert all("CUDA" in f for f in failures)
        assert {f.split(" x ")[1].split(" ")[0] for f in failures} >= {"1", "2", "32"}
    text = gpu_bench.details({"captures": [{"setting": "core hf", "B": 2, **captured}], "rows": []})
    assert "core hf B=2 large: graphs by feed bucket none" in text and "requires CUDA" in text
