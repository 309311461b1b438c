"""Tiny random models and a character tokenizer for tests: built from a config in seconds, offline.

`tiny_backends(kind=...)` serves the same tiny pair on either CPU backend: "hf" (transformers)
or "llama.cpp" (the pair written as F32 GGUF files by scripts/make_tiny_gguf.py), so tests can
be parametrized over `BACKENDS`; `greedy_reference` is each library's own greedy generation.
"""

from __future__ import annotations

import functools
import string
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from harness.backends.hf import HFBackend
from harness.core.records import ModelInfo

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable character plus Qwen's three special tokens."""
    chars = list(string.printable)
    vocab = {c: i for i, c in enumerate(SPECIALS + chars)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="?"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="?"
    )
    fast.add_special_tokens({"additional_special_tokens": SPECIALS})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(seed: int, layers: int = 2, hidden: int = 32, vocab: int = 128):
    """A random Qwen2 causal LM; different seeds give models that disagree on some tokens."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    return model


def info(name: str, model) -> ModelInfo:
    n = sum(p.numel() for p in model.parameters())
    c = model.config
    head = c.hidden_size // c.num_attention_heads
    return ModelInfo(
        name,
        "tiny",
        "cpu",
        "float32",
        n,
        4 * n,
        2 * c.num_hidden_layers * c.num_key_value_heads * head * 4,
    )


def tiny_pair(seed: int = 2, noise: float = 0.6):
    """(small, large): small is large with noise added to its output layer, so the two agree on
    most greedy tokens but not all (like a real small/large pair of one family)."""
    large = tiny_model(seed, layers=3, hidden=48)
    small = tiny_model(seed, layers=3, hidden=48)
    small.load_state_dict(large.state_dict())
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        w = small.lm_head.weight
        w.add_(noise * w.std() * torch.randn(w.shape, generator=g))
    return small, large


BACKENDS = ("hf", "llama.cpp")


def prefixes(n: int) -> list[list[int]]:
    """n prompts of different lengths (3 to 3 + 2(n-1) tokens)."""
    return [[(7 * i + j) % 120 + 3 for j in range(3 + 2 * i)] for i in range(n)]


# by batch size, rounds of one pass each of (slot, tokens fed, rows asked for): catch-ups of 1 to
# 9 tokens and verifies of k + 1 rows in one pass, slots that sit a round out, and feeds longer
# than the largest feed bucket (fed in chunks); tests of the transformers backend's static passes
# (tests/test_hf_static.py, benchmarks/gpu_check.py)
FEED_ROUNDS = {
    1: [[(0, 5, 5)], [(0, 1, 1)], [(0, 9, 1)], [(0, 45, 5)]],
    3: [
        [(0, 1, 1), (1, 5, 5), (2, 3, 1)],
        [(1, 2, 2), (2, 7, 1)],
        [(0, 40, 1), (1, 2, 2)],  # a long feed, one short beside it
        [(0, 4, 4), (1, 1, 1)],
    ],
    8: [
        [(s, 1 + (3 * s) % 7, 1 + (3 * s) % 7 % 3) for s in range(8)],  # every slot, in order
        [(1, 5, 5), (4, 2, 1), (6, 9, 1)],  # three of eight: gathered rows (4)
        [(s, 1, 1) for s in range(8)],  # a one-token step
        [(2, 70, 3), (5, 1, 1), (6, 33, 1)],  # two long feeds of 3 and 2 chunks
        [(7, 3, 3)],  # one of eight: gathered rows (2, a quarter of the slots)
    ],
}


@functools.cache
def tiny_gguf_pair(seed: int = 2) -> tuple[Path, Path]:
    """The tiny pair as two F32 GGUF files (written once per test process)."""
    from scripts.make_tiny_gguf import write_qwen2_gguf

    root = Path(tempfile.mkdtemp(prefix="hybridbench-tiny-gguf-"))
    tok = tiny_tokenizer()
    tok.save_pretrained(root)  # transformers cannot rebuild this char-level vocab from a GGUF
    return tuple(
        write_qwen2_gguf(model, tok, root / f"tiny-{name}-{seed}.gguf", name=f"tiny-{name}")
        for name, model in zip(("small", "large"), tiny_pair(seed), strict=True)
    )


def llamacpp_backend(path: Path, role: str, n_seq: int = 1):
    from harness.backends.llamacpp import LlamaCppBackend, gguf_info

    info = gguf_info(path, role, str(path))
    return LlamaCppBackend(path, info, threads=1, n_ctx=512, n_seq=n_seq)


def tiny_backends(seed: int = 2, kind: str = "hf", n_seq: int = 1) -> dict:
    """{"small", "large"} backends of the tiny pair on `kind` ("hf" or "llama.cpp"); a llama.cpp
    context holds `n_seq` sequences (for batched decoding)."""
    if kind == "llama.cpp":
        paths = tiny_gguf_pair(seed)
        return {
            role: llamacpp_backend(p, role, n_seq)
            for role, p in zip(("small", "large"), paths, strict=True)
        }
    small, large = tiny_pair(seed)
    return {
        "small": HFBackend(small, info("small", small)),
        "large": HFBackend(large, info("large", large)),
    }


def scratch_logits(backend, seq: list[int]):
    """Next-token logits after `seq` from a fresh, cache-free pass of the backend's model."""
    import torch

    if isinstance(backend, HFBackend):
        with torch.no_grad():
            return backend.model(torch.tensor([seq])).logits[0, -1]
    fresh = llamacpp_backend(backend.path, backend.info.name)
    return fresh.forward(seq, 1)[0][0]


def greedy_reference(backend, prompt: list[int], n: int, **hf_kwargs) -> list[int]:
    """The backend's own library generating n greedy tokens (EOS ignored), with no project
    code in the loop: transformers' `generate` (with `hf_kwargs`, e.g. an assistant model), or
    llama-cpp-python's `Llama.generate`."""
    import torch

    if isinstance(backend, HFBackend):
        out = backend.model.generate(
            torch.tensor([prompt]),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            **hf_kwargs,
        )
        return out[0, len(prompt) :].tolist()
    if hf_kwargs:
        raise ValueError(f"{sorted(hf_kwargs)} apply to transformers' generate only")
    from llama_cpp import Llama

    llm = Llama(str(backend.path), n_ctx=512, n_threads=1, verbose=False)
    ids = []
    for tok in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
        ids.append(tok)
        if len(ids) == n:
            break
    llm.close()
    return ids


def save_tiny_pair(root, seed: int = 2):
    """Write the tiny pair as two model folders (weights + tokenizer), like a user's local models."""
    from pathlib import Path

    root = Path(root)
    small, large = tiny_pair(seed)
    tok = tiny_tokenizer()
    out = []
    for name, model in (("small", small), ("large", large)):
        model.generation_config.eos_token_id = tok.eos_token_id
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out.append(str(root / name))
    return tuple(out)


# Pass-cost tables (seconds of one pass of n tokens): on CPU_LIKE a verify pass costs as much as
# its tokens decoded one by one, so speculation never pays; on GPU_LIKE it costs about one step.
CPU_LIKE = {"small": {1: 0.05}, "large": {1: 0.1, 2: 0.2, 33: 3.3}}
GPU_LIKE = {"small": {1: 0.01}, "large": {1: 0.1, 33: 0.12}}
