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
        sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
        outside = torch.cumsum(sorted_p, -1) - sorted_p >= top_p  # keep the token crossing top_p
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
    return probs / probs.sum(-1, keepdim=True)


def sample(logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator) -> int:
    """Greedy argmax at temperature 0; else one draw from `distribution` with the seeded RNG."""
    if temperature <= 0:
        return int(torch.argmax(logits))
    return int(torch.multinomial(distribution(logits, temperature, top_p), 1, generator=gen))
