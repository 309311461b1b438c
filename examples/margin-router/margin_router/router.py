"""The margin router: defer to large where small hesitates between its two likeliest tokens."""

from __future__ import annotations

import torch

from hybridbench import ScoreRouter


class MarginRouter(ScoreRouter):
    """Defers a drafted token when small's top-2 probability margin, p(1st) - p(2nd), is below
    `threshold`: small is torn between two continuations, so large writes this one.

    threshold=X, or target_share=S with calibration=FILE (`hybridbench calibrate --router
    margin`), as for every score router; `hybridbench sweep` uses SWEEP_THRESHOLDS when it is
    given no calibration file.
    """

    name = "margin"
    defers_below = True  # a small margin means an unsure small model
    default_threshold = 0.2
    SWEEP_THRESHOLDS = (0.05, 0.1, 0.2, 0.4, 0.6)
    small_logits = "stats"  # what of small's logits it reads: the per-token summary, not rows

    def token_scores(self, view) -> torch.Tensor:
        """[k] margin of each drafted token, from the logits small drafted it with."""
        return view.stats().margin  # p(1st) - p(2nd) of softmax(view.small_logits), per token
