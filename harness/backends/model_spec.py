"""`ModelSpec`: which pair to load, on which backends, devices and threads, and how many
generations to decode together; the options every command that loads the pair shares
(`--small`, `--large`, `--dtype`, ...), as one typed value.

    engine = engine_from_args(ModelSpec(small="models/small", large="models/large"))

`harness.backends.engine.engine_from_args` reads these fields by name, so it takes this spec or
a `harness.evaluation.spec.RunSpec` (which carries the same fields) alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ModelSpec:
    """The models of one engine."""

    small: str | None = None  # packaged name, model folder or .gguf (None: the default pair's)
    large: str | None = None  # the same, or the http(s) URL of an OpenAI-compatible server
    dtype: str = "bfloat16"  # every transformers model's dtype
    small_device: str = "auto"
    large_device: str = "auto"
    threads: int | None = os.cpu_count()  # CPU threads (torch and llama.cpp)
    backend: str = "auto"  # auto | hf | llama.cpp, for every model
    small_backend: str | None = None  # small's own backend (None: `backend`)
    large_backend: str | None = None  # large's own backend (None: `backend`)
    n_ctx: int | None = None  # llama.cpp context length (None: 4096)
    batch: str = "1"  # generations decoded together: "N" or "auto" (measured per machine)

    @classmethod
    def of(cls, options) -> ModelSpec:
        """The spec of any value carrying these fields by name (parsed options, a RunSpec);
        a field it lacks keeps its default."""
        return cls(**{f.name: getattr(options, f.name, f.default) for f in fields(cls)})
