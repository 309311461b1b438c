"""`hybridbench bench-gpu --tiny` on the CPU: every section runs and writes its rows (speed is
not asserted: the GPU figures come from the same command on a GPU)."""

from __future__ import annotations

import json

from harness.cli.main import main
from harness.evaluation.gpu_bench import HYBRID, ROUTERS


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
            assert ("cost_model_tok_s" in r) == (r["config"] in HYBRID)
        shares = {r["config"]: r["large_token_share"] for r in mine}
        assert shares["small-only"] == 0 and shares["large-only"] == 1
    assert isinstance(result["entropy_threshold"], float) and "memory_B3" in result
    assert "| core hf | 3 | random p=0.2 |" in capsys.readouterr().out
