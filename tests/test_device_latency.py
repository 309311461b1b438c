"""benchmarks/device_latency.py's llama.cpp engine, on CPU with tiny GGUF files: random-weights
files rebuilt from a skeleton (benchmarks/device_shadows.py), and recorded rows replayed over
models that run in worker processes (benchmarks/device_llamacpp_worker.py)."""

import json

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from benchmarks import device_latency as dl  # noqa: E402
from benchmarks import device_shadows as ds  # noqa: E402
from harness.core.loop import DecodeConfig  # noqa: E402
from harness.core.scheduler import generate  # noqa: E402
from harness.evaluation.replay import replay_timed  # noqa: E402
from routers import get_router  # noqa: E402
from tests.tiny import tiny_backends, tiny_gguf_pair  # noqa: E402


def test_random_quantized_blocks_are_small_and_finite(tmp_path):
    """Every quantized type random_gguf knows, dequantized by gguf's own reference code: the
    f16 scales it writes sit where the format keeps them (random bytes there could be inf/NaN
    or huge), so the weights stay within ~0.1."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    head, table, at = b"H" * 64, [], 64
    for kind in ds.SCALES:
        n = 4 * GGML_QUANT_SIZES[GGMLQuantizationType[kind]][1]  # four blocks
        table.append([f"blk.0.{kind}.weight", kind, at, n])
        at += n
    (tmp_path / "m.head").write_bytes(head)
    (tmp_path / "m.json").write_text(json.dumps({"file_size": at, "tensors": table}))
    data = ds.random_gguf(tmp_path, "m", tmp_path / "m.gguf").read_bytes()
    assert len(data) == at and data[:64] == head
    for _, kind, offset, n in table:
        raw = np.frombuffer(data[offset : offset + n], np.uint8).reshape(4, -1)
        w = dequantize(raw, GGMLQuantizationType[kind])
        assert np.isfinite(w).all() and 0 < np.abs(w).max() < 0.2, kind
        assert w.std() > 1e-4, kind  # random, not zeros


def test_skeleton_rebuilds_a_loadable_file_of_the_same_sizes(tmp_path):
    from harness.backends.llamacpp import LlamaCppBackend, gguf_info

    small, _ = tiny_gguf_pair()
    ds.skeleton(small, tmp_path, "small")
    rebuilt = ds.random_gguf(tmp_path, "small", tmp_path / "small-random.gguf")
    assert rebuilt.stat().st_size == small.stat().st_size
    a, b = gguf_info(small, "small", "x"), gguf_info(rebuilt, "small", "x")
    assert (a.weight_bytes, a.n_params, a.kv_bytes_per_token, a.dtype) == (
        b.weight_bytes, b.n_params, b.kv_bytes_per_token, b.dtype)  # fmt: skip
    orig = LlamaCppBackend(small, a, n_ctx=64)
    rand = LlamaCppBackend(rebuilt, b, n_ctx=64)
    x, _ = orig.forward([1, 5, 9], 1)
    y, _ = rand.forward([1, 5, 9], 1)
    assert y.shape == x.shape and bool(y.isfinite().all()) and not np.allclose(x, y)


@pytest.mark.parametrize("row", ["random", "speculative"])
def test_rows_replay_over_worker_processes(tmp_path, row):
    """A row recorded on the tiny llama.cpp pair replays pass for pass over random-weights
    copies that run in worker processes (the device's setup, all on the CPU here)."""
    models = tiny_backends(seed=2, kind="llama.cpp")
    for role, path in zip(("small", "large"), tiny_gguf_pair(), strict=True):
        ds.skeleton(path, tmp_path, role)
    workers = {role: ds.shadow_llamacpp(tmp_path, role, "cpu", 1, tmp_path)
               for role in ("small", "large")}  # fmt: skip
    assert workers["large"].info.backend.startswith("llama.cpp ")
    assert workers["small"].ping_ms > 0
    router = get_router(row, {"p": 0.4} if row == "random" else {"k": 4})
    rec = generate(models, router, [1, 33, 31, 17, 30], DecodeConfig(max_new_tokens=30))
    again = replay_timed(workers, rec.to_json(), None, 30, row == "speculative", lambda: 0.0)
    fw = lambda g: [(f.model, f.phase, f.tokens_in, f.cache_len) for f in g.forwards]  # noqa: E731
    assert fw(again) == fw(rec) and again.token_ids == rec.token_ids
    with pytest.raises(RuntimeError, match="llama_decode failed|ended"):
        workers["small"].forward(list(range(10_000)), 1)  # past its context: the worker says so


def test_pack_rows_keeps_what_a_replay_reads(tmp_path):
    """--pack-rows copies each run's manifest and the examples load_rows would replay (finished
    in every run, in the first run's order, at most --limit), so the packed rows replay the same."""

    def run(name, router, ids, looped=()):
        d = tmp_path / name
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"router": router, "decode": {}}))
        with open(d / "records.jsonl", "w") as f:
            for i in ids:
                stop = "max_tokens" if i in looped else "eos"
                f.write(json.dumps({"example_id": i, "generation": {"stop_reason": stop}}) + "\n")
        return d

    a = run("small__default", "small", ["e1", "e2", "e3", "e4", "e5"], looped={"e2"})
    b = run("random__p=0.1", "random", ["e3", "e1", "e5", "e2"])  # no e4, another order
    dl.pack_rows([a, b], 2, tmp_path / "packed")
    packed = [tmp_path / "packed" / a.name, tmp_path / "packed" / b.name]
    for d in packed:
        ids = [json.loads(x)["example_id"] for x in (d / "records.jsonl").open()]
        assert ids == ["e1", "e3"]
    assert json.loads((packed[1] / "manifest.json").read_text())["router"] == "random"
    assert dl.load_rows(packed, 2) == [
        (p, m, recs) for (_, m, recs), p in zip(dl.load_rows([a, b], 2), packed, strict=True)
    ]
