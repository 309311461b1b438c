"""Tiny random models and a character tokenizer for tests: built from a config in seconds, offline."""

from __future__ import annotations

import string

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from harness.backend import HFBackend
from harness.records import ModelInfo

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


def tiny_backends(seed: int = 2) -> dict:
    small, large = tiny_pair(seed)
    return {
        "small": HFBackend(small, info("small", small)),
        "large": HFBackend(large, info("large", large)),
    }


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
