"""Baseline routers: controls (`small`, `large`, `random`), training-free signals (`entropy`,
`confidence`) and the `oracle` upper bound. Each is a few lines of policy over `StepView`."""

from __future__ import annotations

import torch

from harness.core.router import Decision, LargeOnly, Needs, Router, SmallOnly, StepView, TokenRouter  # noqa: F401  (small and large live with the protocol: the core decodes query routes with them)
from routers.calibration import calibrated, sweep_targets


class RandomRouter(TokenRouter):
    """Defers each token with probability p, drawn from the generation's seeded RNG.

    At a matched rate it is the control every learned router must beat.
    """

    name = "random"

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


class EntropyRouter(TokenRouter):
    """Defers when small's next-token entropy (nats) exceeds `threshold`: small is unsure."""

    name = "entropy"
    # Sweep grid in nats, fixed (not calibrated to targets): 0.25 defers often, 4.0 rarely.
    SWEEP_THRESHOLDS = (0.25, 0.5, 1.0, 2.0, 4.0)

    def __init__(self, threshold=None, target_share=None, calibration=None):
        threshold, cal = calibrated(self.name, threshold, target_share, calibration)
        self.threshold = 1.0 if threshold is None else float(threshold)
        self.target_share, self.calibration = target_share, calibration
        self._ids = frozenset(cal.get("example_ids", ()))

    def defer_mask(self, view: StepView) -> torch.Tensor:
        return entropy(view.small_logits) > self.threshold

    @classmethod
    def sweep_settings(cls, targets: list[float], fixed: dict | None = None) -> list[dict]:
        """`hybridbench sweep`: each target share, calibrated, when the sweep passes
        `calibration=FILE` (`hybridbench calibrate --router entropy`), else SWEEP_THRESHOLDS."""
        return sweep_targets(targets, fixed, cls.SWEEP_THRESHOLDS)

    def describe(self) -> dict:
        return _threshold_description(self)

    def used_example_ids(self) -> frozenset[str]:
        return self._ids


class ConfidenceRouter(TokenRouter):
    """Defers when small's top-token probability is below `threshold`."""

    name = "confidence"
    # Sweep grid of top-token probability, fixed (not calibrated): 0.3 defers rarely, 0.97 often.
    SWEEP_THRESHOLDS = (0.3, 0.5, 0.7, 0.9, 0.97)

    def __init__(self, threshold=None, target_share=None, calibration=None):
        threshold, cal = calibrated(self.name, threshold, target_share, calibration)
        self.threshold = 0.5 if threshold is None else float(threshold)
        self.target_share, self.calibration = target_share, calibration
        self._ids = frozenset(cal.get("example_ids", ()))

    def defer_mask(self, view: StepView) -> torch.Tensor:
        return top_probability(view.small_logits) < self.threshold

    @classmethod
    def sweep_settings(cls, targets: list[float], fixed: dict | None = None) -> list[dict]:
        """`hybridbench sweep`: each target share, calibrated, when the sweep passes
        `calibration=FILE` (`hybridbench calibrate --router confidence`), else SWEEP_THRESHOLDS."""
        return sweep_targets(targets, fixed, cls.SWEEP_THRESHOLDS)

    def describe(self) -> dict:
        return _threshold_description(self)

    def used_example_ids(self) -> frozenset[str]:
        return self._ids


def top_probability(logits: torch.Tensor) -> torch.Tensor:
    """Probability of the most likely token per row: [k, V] -> [k]."""
    return torch.softmax(logits.float(), -1).amax(-1)


def _threshold_description(router) -> dict:
    out = {"threshold": router.threshold}
    if router.target_share is not None:
        out.update(target_share=router.target_share, calibration=router.calibration)
    return out


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
