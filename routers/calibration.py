"""Calibration files: a score router's scores along small's own answers on the calib split, and
the threshold that defers a target share of them (RouteLLM's calibration).

`hybridbench calibrate --router R --task T` writes one (harness/training/calibrate.py) for any
score router (`routers.score.ScoreRouter`); a router given `target_share=S calibration=FILE`
defers where its score falls in the S tail of those scores, the tail its `defers_below` names:

    defers_below = True  (confidence, reward, citer)  -> threshold = the S-quantile
    defers_below = False (entropy)                     -> threshold = the (1 - S)-quantile

The scores come from small writing alone, so the share a router realizes on test, where its
deferrals change what small sees next, can differ: `hybridbench run` reports the realized one.
A file names its router by `router` (the class's `name`) and `router_class` ("module:Class");
files written before the `router` key existed are reward calibrations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from harness.errors import UserError
from harness.files import read_json_file
from routers import router_class


class _DefersBelow(Mapping):
    """Router name -> its `defers_below`, looked up through the registry (no names listed here;
    it lists none either: iterating it gives nothing)."""

    def __getitem__(self, name: str) -> bool:
        return _score_router(name).defers_below

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


DEFERS_BELOW = _DefersBelow()


def _class_of(router) -> type:
    """The class of `router`: an instance (a guarded plugin's too), a class, or a registered name."""
    if isinstance(router, str):
        return router_class(router)
    return router if isinstance(router, type) else type(getattr(router, "router", router))


def _score_router(router) -> type:
    """The score router class of `router` (see `_class_of`); one error line when it is none."""
    cls = _class_of(router)
    if not hasattr(cls, "defers_below"):
        raise UserError(f"router {getattr(cls, 'name', cls.__name__)} is not a score router")
    return cls


def class_path(router) -> str:
    """'module:Class' of a router (an instance, a class or a registered name)."""
    cls = _class_of(router)
    return f"{cls.__module__}:{cls.__qualname__}"


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


def threshold_for(router, scores, target_share: float) -> float:
    """The threshold at which `router` (a score router: instance, class or registered name)
    defers `target_share` of `scores` (its tail; see above)."""
    cls = _score_router(router)
    if not 0 <= target_share <= 1:
        raise UserError(f"router {cls.name}: target_share must be in [0, 1], got {target_share}")
    if cls.defers_below:
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


def read_calibration(path: str | Path, router) -> dict:
    """A calibration file for `router`, a score router (instance, class or registered name): a
    clear error for a missing file or another router's."""
    made_by = "hybridbench calibrate"
    cal = read_json_file(path, "calibration file", made_by)
    scores = cal.get("scores") if isinstance(cal, dict) else None
    if not (isinstance(scores, list) and scores and all(_is_number(s) for s in scores)):
        raise UserError(
            f"{path} is not a calibration file (it holds no list of scores); "
            f"give a file made by {made_by}"
        )
    check_made_for(cal, path, router)
    return cal


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def check_made_for(cal: dict, path, router) -> None:
    """Refuse a calibration file made for another router than `router`: the file's
    `router_class` must be the router's class, or its `router` the router's `name`."""
    cls = _class_of(router)
    made_for = cal.get("router", "reward")
    if cal.get("router_class") == class_path(cls):
        return
    if made_for == cls.name and not ("router_class" in cal and cls.name == "score"):
        return  # "score": the base's name, which a plugin that sets none shares with others
    raise UserError(
        f"{path} calibrates router {made_for!r}, not {cls.name!r}; make one with "
        f"hybridbench calibrate --router {cls.name}"
    )


def calibrated(router, threshold, target_share, calibration) -> tuple[float | None, dict]:
    """(threshold, calibration file or {}) from a score router's arguments (`router`: the
    instance, its class or its registered name): `threshold` as given, or the one deferring
    `target_share` of `calibration`'s scores; not both."""
    if target_share is None:
        return threshold, {}
    name = _score_router(router).name
    if threshold is not None:
        raise UserError(f"router {name} takes threshold=X or target_share=S, not both")
    if not calibration:
        raise UserError(f"router {name}: target_share needs calibration=FILE")
    cal = read_calibration(calibration, router)
    return threshold_for(router, cal["scores"], float(target_share)), cal


def sweep_targets(targets: list[float], fixed: dict | None, grid: tuple) -> list[dict]:
    """Sweep settings of a threshold router: one calibrated target share per target when the
    sweep passes `calibration=FILE`, else the router's fixed threshold grid."""
    if fixed and fixed.get("calibration"):
        return [{"target_share": t} for t in targets]
    return [{"threshold": t} for t in grid]
