"""Next-token distributions and sampling, shared by the core and routers that reason about q and p.

`distribution(logits, T, top_p)` is exactly the distribution `sample` draws from, so a router
(speculative decoding's acceptance rule) can compute the q and p the core actually used.
"""

from __future__ import annotations

import torch


def distribution(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """softmax(logits / T) restricted to the smallest top set of mass >= top_p, renormalized.

    Works on [V] or [k, V]. At temperature 0 it is the one-hot of the argmax (greedy).
    """
    logits = logits.float()
    if temperature <= 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, idx = _descending(probs, top_p)
        outside = torch.cumsum(sorted_p, -1) - sorted_p >= top_p  # keep the token crossing top_p
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
    return probs / probs.sum(-1, keepdim=True)


NUCLEUS_PREFIX = 1024  # most likely tokens sorted first; the full sort only if they hold < top_p


def _descending(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The probabilities in descending order with their indices, or only their first
    NUCLEUS_PREFIX where those already hold mass >= top_p in every row: every token after them
    lies outside the nucleus, so `distribution` is the same and a draw from it too, without
    sorting the whole 151,936-token vocabulary of the default pair for every sampled token
    (`python -m benchmarks.sampling_speed`: 16 rows 1.87x faster on this 2-core CPU)."""
    if probs.shape[-1] > NUCLEUS_PREFIX:
        head, idx = torch.topk(probs, NUCLEUS_PREFIX, dim=-1)
        if bool((torch.cumsum(head, -1)[..., -1] >= top_p).all()):
            return head, idx
    return torch.sort(probs, dim=-1, descending=True)


def sample(logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator) -> int:
    """Greedy argmax at temperature 0; else one draw from `distribution` with the seeded RNG."""
    if temperature <= 0:
        return int(torch.argmax(logits))
    return int(torch.multinomial(distribution(logits, temperature, top_p), 1, generator=gen))
