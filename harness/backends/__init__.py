"""Model backends: the only way the decoding core reaches a model.

A backend holds one model and its KV cache for one generation. The protocol is three calls:

    forward(ids, n_rows, hidden) -> (outputs [n_rows, V], hidden [n_rows, H] | None)
        append `ids` to the cache; return the outputs at the last `n_rows` fed positions
        (next-token logits for a language model, one scalar per token for a reward model)
    crop(n)  -> keep only the first n cached tokens (rollback)
    reset()  -> empty the cache for a new prompt

plus `length` (tokens in the cache), `info` (a `ModelInfo` for the cost model) and `sync()`
(wait for the device so timers measure finished work). One module per backend:

    hf.py        transformers (`HFBackend`): GPU, and CPU for models with no GGUF
    llamacpp.py  llama.cpp in process (`LlamaCppBackend`): what CPU users deploy, reads the
                 quantized GGUF directly (4-6x transformers' speed on this project's CPU)
    remote.py    an OpenAI-compatible completions server (`RemoteBackend`): vLLM, llama-server

Batching (`harness.core.scheduler.generate_many`): `sequences(backend, n)` gives n backends over the same
model, one per generation in flight. A backend whose sequences share an `owner` with a
`forward_batch(calls)` runs their calls together: llama.cpp (sequence ids in one context) and
remote (concurrent requests); transformers runs them one at a time.

`choose()` resolves the `--backend` option (auto, hf, llama.cpp) for one model source.
"""

from __future__ import annotations

import importlib.util

from harness.core.backend import Backend, sequences  # noqa: F401  (the protocol, re-exported)
from harness.errors import UserError

NAMES = ("auto", "hf", "llama.cpp")


def llamacpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def choose(requested: str, is_gguf: bool, device: str) -> str:
    """The backend for one model: `auto` is llama.cpp for a GGUF source on the CPU when
    llama-cpp-python is installed, else transformers. An explicit choice is checked."""
    if requested not in NAMES:
        raise UserError(f"unknown backend {requested!r}; choose one of {', '.join(NAMES)}")
    if requested == "auto":
        ok = is_gguf and device == "cpu" and llamacpp_available()
        return "llama.cpp" if ok else "hf"
    if requested == "llama.cpp":
        if not llamacpp_available():
            raise UserError(
                "backend llama.cpp needs llama-cpp-python: pip install 'hybridbench[llamacpp]'"
            )
        if not is_gguf:
            raise UserError(
                "backend llama.cpp needs a GGUF model (a packaged name or a .gguf file)"
            )
        if device not in ("cpu", "auto"):
            raise UserError(f"backend llama.cpp runs on the CPU here, not on {device!r}")
    return requested
