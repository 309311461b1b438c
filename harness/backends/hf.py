"""Model backends: the only way the decoding core reaches a model.

A backend holds one model and its KV cache for one generation. The protocol is three calls:

    forward(ids, n_rows, hidden) -> (outputs [n_rows, V], hidden [n_rows, H] | None)
        append `ids` to the cache; return the outputs at the last `n_rows` fed positions
        (next-token logits for a language model, one scalar per token for a reward model)
    crop(n)  -> keep only the first n cached tokens (rollback)
    reset()  -> empty the cache for a new prompt

plus `length` (tokens in the cache), `info` (a `ModelInfo` for the cost model) and `sync()`
(wait for the device so timers measure finished work). Transformers is the first backend; a
llama.cpp or remote-server backend implements the same calls.
"""

from __future__ import annotations

from typing import Protocol

import torch

from harness.records import ModelInfo


class Backend(Protocol):
    info: ModelInfo
    length: int

    def reset(self) -> None: ...

    def forward(
        self, ids: list[int], n_rows: int, hidden: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def crop(self, n: int) -> None: ...

    def sync(self) -> None: ...


class HFBackend:
    """A transformers causal LM with a `DynamicCache`; outputs come back as float32 on CPU."""

    def __init__(self, model, info: ModelInfo):
        self.model = model.eval()
        self.info = info
        self.device = next(model.parameters()).device
        self.length = 0
        self.cache = None

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self.length = 0

    @torch.inference_mode()
    def forward(self, ids: list[int], n_rows: int, hidden: bool = False):
        if self.cache is None:
            self.reset()
        x = torch.tensor([ids], device=self.device)
        # logits_to_keep: only the rows the core will read, which skips the vocab projection of
        # every other prompt position (a large share of prefill cost for a 150k vocabulary).
        out = self.model(
            input_ids=x,
            past_key_values=self.cache,
            use_cache=True,
            output_hidden_states=hidden,
            logits_to_keep=n_rows,
        )
        self.cache = out.past_key_values
        self.length += len(ids)
        logits = out.logits[0, -n_rows:].float().cpu()
        h = out.hidden_states[-1][0, -n_rows:].float().cpu() if hidden else None
        return logits, h

    def crop(self, n: int) -> None:
        if n < self.length:
            # a negative count removes tokens from the end in every transformers version we support
            self.cache.crop(n - self.length)
            self.length = n

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
