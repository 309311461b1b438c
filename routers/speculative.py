"""Speculative decoding (Leviathan et al. 2022) as a router over the one decoding core.

Each step small drafts k tokens, large verifies all of them in one forward pass (the core's
`verify`, k+1 rows of p), and this router keeps the accepted prefix and names large's next token:
the correction at the first rejected position, or a bonus token when every draft is accepted.
The core then crops both caches to the kept tokens (its `rollback`). The output is distributed
exactly as large's own sampling; at temperature 0 it equals large's greedy output token for token.

    hybridbench generate --router speculative --router-arg k=4 --prompt "What is 17*23?"
    hybridbench generate --router speculative --router-arg adaptive=true --prompt "..."

Notation, as in the paper and `routers.base`: q = small's next-token distribution, p = large's,
both exactly the distributions the core samples from (`harness.sampling.distribution`).
"""

from __future__ import annotations

import torch

from harness.sampling import distribution
from routers.base import Decision, Needs, Router, StepView


def speculative_sampling(
    draft: torch.Tensor, q: torch.Tensor, p: torch.Tensor, generator: torch.Generator
) -> tuple[int, int]:
    """Leviathan et al.'s acceptance rule: how many drafted tokens to keep, and large's next token.

    draft: [k] token ids x_1..x_k, x_i drawn from q_i.
    q:     [k, V] small's distributions q_i(.) that x_i was drawn from.
    p:     [k+1, V] large's distributions p_i(.) at the same positions, plus p_{k+1} after x_k.

    For i = 1..k: draw r ~ U(0, 1); accept x_i if r < min(1, p_i(x_i) / q_i(x_i)).
    At the first rejection i, return (i-1, y) with y ~ norm(max(0, p_i - q_i)) (the residual).
    If all k are accepted, return (k, y) with the bonus token y ~ p_{k+1}.
    The emitted tokens are then distributed exactly as samples from p (the paper's Theorem 3.5).
    All randomness comes from `generator`.

    Example: q_1 = p_1 = [0.5, 0.5, 0, ...] accepts any x_1 with probability 1.
    """
    k = len(draft)
    u = torch.rand(k, generator=generator)
    p_x = p[torch.arange(k), draft]
    q_x = q[torch.arange(k), draft]
    # r < p/q  <=>  r * q < p: no division, and q_x > 0 always holds for a token drawn from q
    rejected = torch.nonzero(u * q_x >= p_x).flatten()
    if len(rejected) == 0:
        return k, _draw(p[k], generator)
    i = int(rejected[0])
    residual = torch.clamp(p[i] - q[i], min=0.0)
    if residual.sum() <= 0:  # p_i == q_i up to rounding: rejection had probability ~0
        residual = p[i]
    return i, _draw(residual / residual.sum(), generator)


def greedy_accept(draft: torch.Tensor, large_logits: torch.Tensor) -> tuple[int, int]:
    """Temperature 0: keep drafted tokens while each equals large's argmax; large's next token is
    the argmax at the first mismatch (or after the last draft). The limit T -> 0 of
    `speculative_sampling`, where q and p are one-hot, without drawing randomness."""
    best = large_logits.argmax(-1)
    k = len(draft)
    mismatch = torch.nonzero(draft != best[:k]).flatten()
    n = int(mismatch[0]) if len(mismatch) else k
    return n, int(best[n])


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


class Speculative(Router):
    """Small drafts `k` tokens, large verifies them in one pass, the acceptance rule decides.

    With `adaptive=true`, k follows HF's "heuristic" schedule within a generation: after a step
    where every drafted token was accepted k += 2, else k = max(1, k - 1), capped at `max_k`;
    each prompt starts again from `k` (HF's "heuristic_transient").
    """

    name = "speculative"

    def __init__(self, k: int = 4, adaptive: bool = False, max_k: int = 32):
        if not 1 <= k <= max_k:
            raise ValueError(f"k must be in [1, max_k={max_k}], got {k}")
        self.k, self.adaptive, self.max_k = k, bool(adaptive), max_k
        self._k = k

    def reset(self) -> None:
        self._k = self.k

    def needs(self) -> Needs:
        return Needs(draft_len=self._k, large_logits=True)

    def decide(self, view: StepView) -> Decision:
        if view.temperature <= 0:
            n, tok = greedy_accept(view.draft, view.large_logits)
        else:
            q = distribution(view.small_logits, view.temperature, view.top_p)
            p = distribution(view.large_logits, view.temperature, view.top_p)
            n, tok = speculative_sampling(view.draft, q, p, view.generator)
        if self.adaptive:
            # the core may draft fewer than asked (EOS, token budget): judge by what was drafted
            all_kept = n == len(view.draft)
            self._k = min(self.max_k, self._k + 2) if all_kept else max(1, self._k - 1)
        return Decision(keep=n, defer=True, large_token=tok)

    def describe(self) -> dict:
        return {"k": self.k, "adaptive": self.adaptive, "max_k": self.max_k}
