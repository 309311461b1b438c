"""Calibration files: a token router's scores along small's own answers on the calib split, and
the threshold that defers a target share of them (RouteLLM's calibration).

`hybridbench calibrate --router R --task T` writes one (harness/training/calibrate.py); a router given
`target_share=S calibration=FILE` defers where its score falls in the S tail of those scores:

    reward       defers a score below the threshold  -> threshold = the S-quantile
    citer        defers a P(small suffices) below it  -> threshold = the S-quantile
    confidence   defers a top probability below it   -> threshold = the S-quantile
    entropy      defers an entropy above it           -> threshold = the (1 - S)-quantile

The scores come from small writing alone, so the share a router realizes on test, where its
deferrals change what small sees next, can differ: `hybridbench run` reports the realized one.
Files written before the `router` key existed are reward calibrations.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from harness.errors import UserError

DEFERS_BELOW = {"reward": True, "citer": True, "confidence": True, "entropy": False}


def calibrated_threshold(scores, target_share: float) -> float:
    """The threshold that defers a `target_share` of `scores` (defer = score < threshold):
    their `target_share` quantile (RouteLLM's calibration). 0 -> -inf, 1 -> +inf.
    Example: scores [1, 2, 3, 4, 5], target 0.5 -> 3.0 (1 and 2 defer: 40% of five scores)."""
    import numpy as np

    if target_share <= 0:
        return -math.inf
    if target_share >= 1:
        return math.inf
    return float(np.quantile(np.asarray(scores, dtype=float), target_share))


def threshold_for(router: str, scores, target_share: float) -> float:
    """The threshold at which `router` defers `target_share` of `scores` (its tail; see above)."""
    if not 0 <= target_share <= 1:
        raise UserError(f"router {router}: target_share must be in [0, 1], got {target_share}")
    if DEFERS_BELOW[router]:
        return calibrated_threshold(scores, target_share)
    return -calibrated_threshold([-s for s in scores], target_share)


def checkpoint_threshold(ckpt: dict, path, share, threshold, share_key: str):
    """(share, threshold) of a trained router from its checkpoint (`hybridbench train-citer`,
    `train-query`): `threshold` as given, else the one sending `share` of its calib scores to
    large, else the checkpoint's own; `share` defaults to the checkpoint's `share_key`."""
    if share is not None and not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share}")
    if share is not None and threshold is None and "calib_scores" not in ckpt:
        raise ValueError(f"{path} keeps no calib scores (trained before share=); give threshold")
    if threshold is None:
        threshold = (
            ckpt["threshold"]
            if share is None
            else calibrated_threshold(ckpt["calib_scores"], share)
        )
    return (ckpt.get(share_key) if share is None else share), float(threshold)


def read_calibration(path: str | Path, router: str) -> dict:
    """A calibration file for `router` (a clear error for a missing file or another router's)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"calibration file not found: {path}")
    try:
        cal = json.loads(path.read_text())
        cal["scores"]  # noqa: B018 - a required key
    except (ValueError, KeyError, TypeError):
        raise UserError(f"not a calibration file: {path}") from None
    made_for = cal.get("router", "reward")
    if made_for != router:
        raise UserError(f"{path} calibrates router {made_for!r}, not {router!r}")
    return cal


def calibrated(router: str, threshold, target_share, calibration) -> tuple[float | None, dict]:
    """(threshold, calibration file or {}) from a router's arguments: `threshold` as given, or
    the one deferring `target_share` of `calibration`'s scores; not both."""
    if target_share is None:
        return threshold, {}
    if threshold is not None:
        raise UserError(f"router {router} takes threshold=X or target_share=S, not both")
    if not calibration:
        raise UserError(f"router {router}: target_share needs calibration=FILE")
    cal = read_calibration(calibration, router)
    return threshold_for(router, cal["scores"], float(target_share)), cal


def sweep_targets(targets: list[float], fixed: dict | None, grid: tuple) -> list[dict]:
    """Sweep settings of a threshold router: one calibrated target share per target when the
    sweep passes `calibration=FILE`, else the router's fixed threshold grid."""
    if fixed and fixed.get("calibration"):
        return [{"target_share": t} for t in targets]
    return [{"threshold": t} for t in grid]
