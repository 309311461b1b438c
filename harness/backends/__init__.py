"""Model backends: the only way the decoding core reaches a model.

A backend holds one model and its KV cache for one generation, behind the protocol of
`harness.core.backend` (forward, crop, reset, sync, length, info). One module per backend:

    hf.py        transformers (`HFBackend`): GPU, and CPU for models with no GGUF
    llamacpp.py  llama.cpp in process (`LlamaCppBackend`): what CPU users deploy, reads the
                 quantized GGUF directly (4-6x transformers' speed on this project's CPU)
    remote.py    an OpenAI-compatible completions server (`RemoteBackend`): vLLM, llama-server

Batching (`harness.core.scheduler.generate_many`): `sequences(backend, n)` gives n backends over the same
model, one per generation in flight. A backend whose sequences share an `owner` with a
`forward_batch(calls)` runs their calls together: llama.cpp (sequence ids in one context),
transformers (slots of one preallocated cache, ragged rows in one pass) and remote (concurrent
requests).

Outputs: a backend with `summarizes = True` (llama.cpp, transformers) also takes
`forward(..., level=)`, "stats" or "argmax", and returns a `harness.core.stats.TokenStats`
instead of full logits rows (computed where the logits are); the core asks for that when the
router reads no more, and summarizes other backends' rows itself.

Devices: transformers runs where its model was loaded; llama.cpp puts every layer on the GPU
for a role on "cuda" (`--large-device cuda`) and none for one on "cpu", so small on the CPU and
large on the GPU is one command (`--backend llama.cpp`); a llama-cpp-python built without GPU
offload is refused with the line that builds one (docs/speed.md).

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
    llama-cpp-python is installed, else transformers. An explicit choice is checked: llama.cpp
    on a GPU needs a llama-cpp-python built with GPU offload (`llamacpp_gpu_offload`)."""
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
            from harness.backends.llamacpp import gpu_layers

            gpu_layers(device)  # a clear error for a device it cannot use, or no GPU offload
    return requested
