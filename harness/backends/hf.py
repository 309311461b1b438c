"""The transformers backend: a causal LM with a `DynamicCache` (GPU, and CPU for models with no
GGUF). Outputs come back as float32 on CPU. See `harness.backends` for the protocol."""

from __future__ import annotations

import copy

import torch

from harness.core.records import ModelInfo


def cache_kwarg(model) -> str:
    """The keyword `model`'s forward takes its KV cache by: `cache` in recent transformers
    (which warn on the older `past_key_values` and drop it in 5.40), else `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def returned_cache(out):
    """The KV cache a transformers model output carries, under either name."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


class HFBackend:
    """A transformers causal LM with a `DynamicCache`; outputs come back as float32 on CPU."""

    def __init__(self, model, info: ModelInfo):
        self.model = model.eval()
        self.cache_kwarg = cache_kwarg(model)
        self.info = info
        self.device = next(model.parameters()).device
        self.length = 0
        self.cache = None

    @property
    def n_vocab(self) -> int:
        """Rows of the output layer (the vocabulary the logits cover, padding included)."""
        return self.model.get_output_embeddings().weight.shape[0]

    def sequences(self, n: int) -> list[HFBackend]:
        """n backends over the same weights, each with its own cache. transformers runs them one
        call at a time (no `forward_batch`): padded batches would change the numerics."""
        return [self] + [self._fresh() for _ in range(n - 1)]

    def _fresh(self) -> HFBackend:
        other = copy.copy(self)
        other.cache, other.length = None, 0
        return other

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
            use_cache=True,
            output_hidden_states=hidden,
            logits_to_keep=n_rows,
            **{self.cache_kwarg: self.cache},
        )
        self.cache = returned_cache(out)
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
