"""Random-weight models of a pair's shapes, for benchmarks that need no weight files: built from
a config (`model_config`: the default pair's shapes are written below; `load_config`: any pair's
config.json), as transformers backends (`hf_backend`) or written as GGUF files for llama.cpp
(`gguf_of`, `llamacpp_backends`). Used by `hybridbench bench-gpu` (`harness.evaluation.gpu_bench`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from harness.backends.hf import HFBackend
from harness.core.records import ModelInfo

QWEN_CODER_SHAPES = {
    "small": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
    },
    "large": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
    },
}
QWEN_COMMON = {
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
}
TINY_SHAPES = {
    "small": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
    "large": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
}
TINY_COMMON = {"vocab_size": 256, "max_position_embeddings": 512, "tie_word_embeddings": False}


def model_config(shape: dict, common: dict):
    from transformers import Qwen2Config

    return Qwen2Config(**common, **shape)


def load_config(path: str):
    """A config from a config.json file or a model folder (no weights read)."""
    from transformers import AutoConfig

    p = Path(path)
    return AutoConfig.from_pretrained(str(p.parent if p.name == "config.json" else p))


def random_model(config, device: str, dtype: torch.dtype, seed: int):
    """A causal LM of `config`'s shapes with random weights, built on `device` (no copy)."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(config)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        except TypeError:  # transformers before `dtype`
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    return model.eval()


def hf_backend(model, role: str, n_ctx: int) -> HFBackend:
    from harness.backends import models

    size = next(model.parameters()).element_size()
    info = ModelInfo(
        name=role,
        source=f"random:{model.config.hidden_size}x{model.config.num_hidden_layers}",
        device=str(next(model.parameters()).device),
        dtype=str(model.dtype).replace("torch.", ""),
        n_params=sum(p.numel() for p in model.parameters()),
        weight_bytes=models.weight_bytes(model),
        kv_bytes_per_token=models.kv_bytes_per_token(model.config, size),
    )
    return HFBackend(model, info, n_ctx=n_ctx)


def llamacpp_status(gpu: bool) -> str:
    """Why llama.cpp cannot run here (on a GPU: built without GPU offload), or "" if it can."""
    try:
        from harness.backends.llamacpp import _lib

        lib = _lib()
    except Exception as e:  # noqa: BLE001 - reported in the JSON, the rest runs
        return f"llama-cpp-python unavailable: {e}"
    if gpu and not lib.llama_supports_gpu_offload():
        return "llama-cpp-python has no GPU offload (docs/speed.md: build it with CUDA)"
    return ""


def gguf_of(model, folder: Path, role: str, threads: int, quantize: bool) -> Path:
    """`model`'s random weights as a GGUF file (F32, then Q8_0 when `quantize`), written with
    the project's own writer (scripts/make_tiny_gguf.py: needs a checkout and `gguf`)."""
    from harness.backends.llamacpp import _lib

    try:
        from scripts.make_tiny_gguf import write_qwen2_gguf
    except ImportError as e:
        raise RuntimeError(f"writing a GGUF needs the checkout's scripts/ and gguf: {e}") from e
    cpu = copy.deepcopy(model).float().cpu() if next(model.parameters()).is_cuda else model
    f32 = write_qwen2_gguf(cpu, _NoTokenizer(), folder / f"{role}-f32.gguf", name=f"random-{role}")
    if not quantize:
        return f32
    import ctypes

    lib = _lib()
    params = lib.llama_model_quantize_default_params()
    params.ftype, params.nthread = lib.LLAMA_FTYPE_MOSTLY_Q8_0, threads
    out = folder / f"{role}-q8_0.gguf"
    if lib.llama_model_quantize(str(f32).encode(), str(out).encode(), ctypes.byref(params)):
        return f32
    f32.unlink()
    return out


class _NoTokenizer:
    """What the GGUF writer reads of a tokenizer, for token ids only (no text is ever read)."""

    all_special_tokens: list = []
    eos_token_id = pad_token_id = 0
    chat_template = None

    def get_vocab(self) -> dict:
        return {}


def llamacpp_backends(files: dict, devices: dict, b: int, n_ctx: int, threads: int) -> dict:
    from harness.backends.llamacpp import LlamaCppBackend, gguf_info

    out = {}
    for role, path in files.items():
        info = gguf_info(path, role, f"random:{path.name}", device=devices[role])
        out[role] = LlamaCppBackend(
            path, info, threads=threads, n_ctx=n_ctx, n_seq=b, device=devices[role]
        )
    return out
