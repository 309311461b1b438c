"""Baseline routers: controls (`small`, `large`, `random`), training-free signals (`entropy`,
`confidence`: score routers, `routers.score`) and the `oracle` upper bound. Each is a few lines
of policy over `StepView`."""

from __future__ import annotations

import torch

from harness.core.router import Decision, LargeOnly, Needs, Router, SmallOnly, StepView, TokenRouter  # noqa: F401  (small and large live with the protocol: the core decodes query routes with them)
from routers.score import ScoreRouter


class RandomRouter(TokenRouter):
    """Defers each token with probability p, drawn from the generation's seeded RNG.

    At a matched rate it is the control every learned router must beat.
    """

    name = "random"
    small_logits = "argmax"  # reads nothing of q

    def __init__(self, p: float = 0.5):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p = p

    def defer_mask(self, view: StepView) -> torch.Tensor:
        return torch.rand(len(view.draft), generator=view.generator) < self.p

    @classmethod
    def sweep_settings(cls, targets: list[float], fixed: dict | None = None) -> list[dict]:
        """`hybridbench sweep`: one setting per target large-token share, p = the target."""
        return [{"p": t} for t in targets]

    def describe(self) -> dict:
        return {"p": self.p}


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of softmax(logits) per row: [k, V] -> [k]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


class EntropyRouter(ScoreRouter):
    """Defers when small's next-token entropy (nats) exceeds `threshold`: small is unsure."""

    name = "entropy"
    defers_below = False
    default_threshold = 1.0
    # Sweep grid in nats, fixed (not calibrated to targets): 0.25 defers often, 4.0 rarely.
    SWEEP_THRESHOLDS = (0.25, 0.5, 1.0, 2.0, 4.0)

    small_logits = "stats"  # the core's per-token summary, not whole rows

    def token_scores(self, view: StepView) -> torch.Tensor:
        return view.stats().entropy  # = entropy(view.small_logits), computed where q is


class ConfidenceRouter(ScoreRouter):
    """Defers when small's top-token probability is below `threshold`."""

    name = "confidence"
    defers_below = True
    default_threshold = 0.5
    # Sweep grid of top-token probability, fixed (not calibrated): 0.3 defers rarely, 0.97 often.
    SWEEP_THRESHOLDS = (0.3, 0.5, 0.7, 0.9, 0.97)

    small_logits = "stats"  # the core's per-token summary, not whole rows

    def token_scores(self, view: StepView) -> torch.Tensor:
        return view.stats().top_prob  # = top_probability(view.small_logits), computed where q is


def top_probability(logits: torch.Tensor) -> torch.Tensor:
    """Probability of the most likely token per row: [k, V] -> [k]."""
    return torch.softmax(logits.float(), -1).amax(-1)


class OracleRouter(TokenRouter):
    """Defers exactly where small's greedy token differs from large's greedy token.

    It reads large's logits at every step (large_call_share = 1), so it is an upper bound on
    what a per-token router can save in large *tokens*, not in large *calls*. At temperature 0
    its output equals large's greedy output token for token.
    """

    name = "oracle"

    def needs(self) -> Needs:
        return Needs(draft_len=self.draft_len, large_logits=True)

    def defer_mask(self, view: StepView) -> torch.Tensor:
        k = len(view.draft)
        return view.small_logits.argmax(-1) != view.large_logits[:k].argmax(-1)
