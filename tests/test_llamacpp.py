"""The llama.cpp backend on the tiny pair written as F32 GGUF files (scripts/make_tiny_gguf.py).

F32 files make transformers and llama.cpp compute the same function, so their logits and last
hidden states agree up to rounding: llama.cpp keeps the KV cache in f16 (its default, kept here
as in real runs: ~1e-3 relative error on K and V) and sums in another order. Tolerances: 1e-3
absolute on logits (magnitude ~1), 3e-3 on the last hidden state (after the RMS norm, ~1-3). Greedy routing
on llama.cpp is checked against llama-cpp-python's own greedy generation (`Llama.generate`).
"""

from __future__ import annotations

import pytest
import torch

from harness.backends import choose
from harness.backends.llamacpp import LlamaCppBackend, gguf_info
from harness.core.loop import DecodeConfig, GenerationState, catch_up, rollback
from harness.core.scheduler import generate, run_calls
from harness.errors import UserError
from routers import get_router
from tests.tiny import (
    CPU_LIKE,
    GPU_LIKE,
    greedy_reference,
    llamacpp_backend,
    tiny_backends,
    tiny_gguf_pair,
    tiny_pair,
)

PROMPT = [1, 33, 31, 17, 30, 99, 20, 21, 97, 32, 20, 17, 2, 99, 1, 13]
N = 24
ATOL = 1e-3
HIDDEN_ATOL = 3e-3


@pytest.fixture(scope="module")
def pair():
    return tiny_backends(kind="llama.cpp")


@pytest.fixture(scope="module")
def hf_pair():
    return tiny_pair()


@pytest.mark.parametrize("role", ["small", "large"])
def test_logits_and_hidden_equal_transformers_on_the_same_file(pair, hf_pair, role):
    hf = hf_pair[0] if role == "small" else hf_pair[1]
    b = pair[role]
    b.reset()
    logits, hidden = b.forward(PROMPT, len(PROMPT), hidden=True)
    with torch.no_grad():
        ref = hf(torch.tensor([PROMPT]), output_hidden_states=True)
    assert logits.shape == (len(PROMPT), hf.config.vocab_size) and logits.dtype == torch.float32
    torch.testing.assert_close(logits, ref.logits[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(hidden, ref.hidden_states[-1][0], atol=HIDDEN_ATOL, rtol=0)
    # a later one-token pass without hidden states: logits only, still equal
    nxt, h = b.forward([40], 1)
    assert h is None
    with torch.no_grad():
        ref2 = hf(torch.tensor([PROMPT + [40]])).logits[0, -1]
    torch.testing.assert_close(nxt[0], ref2, atol=ATOL, rtol=0)


def test_catch_up_and_crop_equal_a_from_scratch_pass(pair):
    """After k unseen tokens in one pass, and after crop + re-feed of another branch, the next
    logits equal a fresh context's pass over the same sequence."""
    fresh = llamacpp_backend(pair["large"].path, "large")

    def scratch(seq):
        fresh.reset()
        return fresh.forward(seq, 1)[0][0]

    r = GenerationState(pair, list(PROMPT), len(PROMPT), clock=lambda: 0.0)
    pair["large"].reset()
    run_calls(catch_up(r, "large", PROMPT[:5], 1))
    seq = PROMPT + [40, 41, 42, 43]
    got, _ = run_calls(catch_up(r, "large", seq, 1))
    assert r.forwards[-1].tokens_in == len(seq) - 5
    torch.testing.assert_close(got[0], scratch(seq), atol=ATOL, rtol=0)
    rollback(r, len(PROMPT) + 1)
    assert pair["large"].length == len(PROMPT) + 1
    seq2 = PROMPT + [40, 50, 51]
    got2, _ = run_calls(catch_up(r, "large", seq2, 1))
    torch.testing.assert_close(got2[0], scratch(seq2), atol=ATOL, rtol=0)


def test_feeds_longer_than_a_batch_are_split(pair):
    b = llamacpp_backend(pair["small"].path, "small")
    long = (PROMPT * 40)[:500]
    whole, _ = b.forward(long, 3)
    small_batch = LlamaCppBackend(b.path, b.info, threads=1, n_ctx=512, n_batch=64)
    split, _ = small_batch.forward(long, 3)  # eight llama_decode calls
    assert small_batch.length == len(long)
    # another batching sums attention over other blocks of positions: rounding-level changes
    torch.testing.assert_close(split, whole, atol=HIDDEN_ATOL, rtol=0)


def run(pair, name, args=None, **cfg):
    return generate(pair, get_router(name, args), PROMPT, DecodeConfig(max_new_tokens=N, **cfg))


def test_keep_everything_equals_llamacpp_own_greedy(pair):
    g = run(pair, "small")
    assert list(g.token_ids) == greedy_reference(pair["small"], PROMPT, N)
    assert set(g.provenance) == {0}


@pytest.mark.parametrize(
    "name,args",
    [
        ("large", {}),
        ("random", {"p": 1.0}),
        ("oracle", {}),
        ("speculative", {"k": 4}),
        ("speculative", {"adaptive": True, "schedule": "heuristic"}),
        ("speculative", {"adaptive": True, "costs": CPU_LIKE}),
        ("speculative", {"adaptive": True, "costs": GPU_LIKE}),
    ],
)
def test_large_equivalent_routers_equal_large_greedy(pair, name, args):
    g = run(pair, name, args)
    large = greedy_reference(pair["large"], PROMPT, N)
    assert list(g.token_ids) == large
    assert greedy_reference(pair["small"], PROMPT, N) != large  # the models do differ


def test_info_counts_quantized_bytes_and_kv():
    small_path, _ = tiny_gguf_pair()
    info = gguf_info(small_path, "small", "tiny", "abc")
    hf = tiny_pair()[0]
    c = hf.config
    embed = c.vocab_size * c.hidden_size
    assert info.n_params == sum(p.numel() for p in hf.parameters())
    assert info.weight_bytes == 4 * (info.n_params - embed)  # F32, token table not read
    head_dim = c.hidden_size // c.num_attention_heads
    assert info.kv_bytes_per_token == 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * 2
    assert info.dtype == "gguf:F32 x" + str(len(list(hf.state_dict())))
    assert info.backend.startswith("llama.cpp ")


def test_context_too_small_is_a_clear_error(pair):
    b = LlamaCppBackend(pair["small"].path, pair["small"].info, threads=1, n_ctx=32)
    assert b.n_ctx >= 32  # llama.cpp may round the context up
    b.forward(PROMPT, 1)
    with pytest.raises(UserError, match="too small.*--n-ctx"):
        b.forward([5] * (b.n_ctx - len(PROMPT) + 1), 1)
    assert b.length == len(PROMPT)  # nothing was fed


def test_unloadable_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(UserError):
        gguf_info(bad, "small", str(bad))
    with pytest.raises(UserError, match="could not load"):
        LlamaCppBackend(bad, None, threads=1)


def test_choose_backend():
    assert choose("auto", True, "cpu") == "llama.cpp"
    assert choose("auto", True, "cuda") == "hf"
    assert choose("auto", False, "cpu") == "hf"
    with pytest.raises(UserError, match="GGUF"):
        choose("llama.cpp", False, "cpu")
    with pytest.raises(UserError, match="unknown backend"):
        choose("vllm", True, "cpu")


def test_gguf_sizes_are_read_once_per_file(tmp_path, monkeypatch):
    """Parsing a GGUF header takes seconds for a real vocabulary: sizes are cached per file
    (path, size, modification time) and read again when the file changes."""
    import os
    import shutil

    import harness.backends.llamacpp as lc

    monkeypatch.setenv("HYBRIDBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lc, "CACHE_GGUF_INFO_FROM", 0)  # the tiny file stands in for a real one
    copy = tmp_path / "m.gguf"
    shutil.copy(tiny_gguf_pair()[0], copy)
    reads = []
    real = lc._read_gguf_sizes
    monkeypatch.setattr(lc, "_read_gguf_sizes", lambda *a: reads.append(a) or real(*a))
    first = gguf_info(copy, "small", "tiny", "abc")
    again = gguf_info(copy, "large", "other", "def")
    assert len(reads) == 1
    assert (again.name, again.source, again.sha256) == ("large", "other", "def")
    assert again.__dict__ | {"name": "small", "source": "tiny", "sha256": "abc"} == first.__dict__
    gguf_info(copy, "small", "tiny", embeddings_only=True)  # counts other tensors: its own entry
    assert len(reads) == 2
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert gguf_info(copy, "small", "tiny", "abc") == first and len(reads) == 3


def test_summaries_equal_the_full_rows(pair):
    """Asked for "stats" or "argmax", the backend summarizes llama.cpp's own output buffer
    (`row_stats`, numpy, no copy of the rows): the same argmax as the full rows, and entropy,
    top-1 probability and margin equal to `summarize` of those rows up to float rounding."""
    from harness.core.stats import TokenStats, token_stats

    b = pair["large"]
    rows = {}
    for level in ("full", "stats", "argmax"):
        b.reset()
        rows[level] = b.forward(PROMPT, 3, level=level)[0]
    want = token_stats(rows["full"])
    got = rows["stats"]
    assert isinstance(got, TokenStats) and got.level == "stats" and len(got) == 3
    assert torch.equal(got.argmax, want.argmax) and torch.equal(rows["argmax"].argmax, want.argmax)
    assert rows["argmax"].top_prob is None
    for field in ("top_prob", "entropy", "margin"):
        torch.testing.assert_close(getattr(got, field), getattr(want, field), atol=1e-5, rtol=1e-5)
    # batched calls at different levels in one llama_decode
    seqs = tiny_backends(kind="llama.cpp", n_seq=2)["large"].sequences(2)
    (full, _), (stats, _) = seqs[0].owner.forward_batch(
        [(seqs[0], PROMPT, 2, False, "full"), (seqs[1], PROMPT[:5], 1, False, "stats")]
    )
    assert full.shape[0] == 2 and isinstance(stats, TokenStats) and len(stats) == 1


def test_device_decides_the_offloaded_layers(monkeypatch):
    """A role on the CPU asks llama.cpp for no GPU layers and one on "cuda" for all of them
    (llama.cpp's "a negative value means all layers"); without GPU offload in the installed
    llama-cpp-python a GPU is refused with the line that builds it. What a CPU can check: the
    count each load asks for (a CPU build loads the "cuda" model on the CPU all the same)."""
    import harness.backends.llamacpp as lc
    from harness.backends.engine import load_backend

    lib = lc._lib()
    assert lc.gpu_layers("cpu") == 0
    with pytest.raises(UserError, match="backend llama.cpp runs on the CPU or a CUDA GPU"):
        lc.gpu_layers("mps")
    if not lib.llama_supports_gpu_offload():
        with pytest.raises(UserError, match='CMAKE_ARGS="-DGGML_CUDA=on" pip install'):
            lc.gpu_layers("cuda")
        with pytest.raises(UserError, match="no GPU offload"):
            choose("llama.cpp", True, "cuda")
        monkeypatch.setattr(lib, "llama_supports_gpu_offload", lambda: True)
    assert lc.gpu_layers("cuda") == lc.gpu_layers("cuda:1") == lc.ALL_LAYERS == -1
    assert choose("llama.cpp", True, "cuda") == "llama.cpp"
    asked = []
    load = lib.llama_model_load_from_file

    def spy(path, params):
        asked.append((params.n_gpu_layers, params.main_gpu, params.split_mode))
        return load(path, params)

    monkeypatch.setattr(lib, "llama_model_load_from_file", spy)
    small, large = tiny_gguf_pair()
    s, _ = load_backend(str(small), "small", "llama.cpp", "cpu", threads=1, n_ctx=256)
    g, _ = load_backend(str(large), "large", "llama.cpp", "cuda", threads=1, n_ctx=256)
    assert asked[0][0] == 0 and asked[1][0] == -1  # small on the CPU, large all on the GPU
    assert (s.info.device, g.info.device) == ("cpu", "cuda") and g.n_gpu_layers == -1
    lc.LlamaCppBackend(large, g.info, threads=1, n_ctx=256, device="cuda:0")
    assert asked[-1] == (-1, 0, lib.LLAMA_SPLIT_MODE_NONE)  # one named GPU holds it all
