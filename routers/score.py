"""Score routers: a score for each drafted token, and a threshold on one side of which it defers.

Most token routers are this (RouteLLM's interface: one method returns a score, the threshold
routes): `entropy` (small's next-token entropy, defers above), `confidence` (small's top
probability, defers below), `reward` (a reward model's score, below) and `citer` (an MLP's
P(small suffices), below). A new one is a class with `token_scores`:

    class MarginRouter(ScoreRouter):
        '''Defers when small's top-2 probability margin is below the threshold.'''

        name = "margin"
        defers_below = True  # a small margin: small hesitates between two tokens
        default_threshold = 0.2
        SWEEP_THRESHOLDS = (0.05, 0.1, 0.2, 0.4)

        def token_scores(self, view):
            top2 = torch.softmax(view.small_logits.float(), -1).topk(2, dim=-1).values
            return top2[:, 0] - top2[:, 1]

and everything threshold-related comes with the base, for any subclass:

- `threshold=X`, or `target_share=S calibration=FILE`: the threshold deferring a share S of the
  scores in a file written by `hybridbench calibrate --router NAME` (small's own calib answers,
  scored through this same `token_scores`; routers/calibration.py);
- `hybridbench sweep`: each target share when given a calibration file, else SWEEP_THRESHOLDS;
- the example ids of the calibration are never evaluated on (`used_example_ids`).

`token_scores` sees the `StepView` of a step: small's logits (and its hidden state, a reward
score or large's logits when `needs()` asks for them) for each of the k drafted tokens, and
returns a [k] tensor. Calibration builds the same views by teacher forcing small's answers, so
the scores on file are the ones the router reads while small writes.
"""

from __future__ import annotations

import torch

from harness.core.router import StepView, TokenRouter
from harness.errors import UserError
from routers.calibration import calibrated, sweep_targets
from routers.guard import checked_scores


class ScoreRouter(TokenRouter):
    """A token router that scores each drafted token and defers on one side of a threshold.

    Subclasses set `name`, `defers_below` and write `token_scores`; the base's constructor takes
    threshold=, target_share= and calibration= (a subclass with more arguments calls
    `set_threshold` from its own)."""

    name = "score"
    defers_below: bool = True  # defer where score < threshold; False: where score > threshold
    default_threshold: float | None = None  # when neither threshold nor target_share is given
    SWEEP_THRESHOLDS: tuple[float, ...] = ()  # sweep grid without a calibration file
    checkpoint_arg: str | None = None  # argument naming a trained scorer: calibrate --checkpoint

    def __init__(self, threshold=None, target_share=None, calibration=None):
        self.set_threshold(threshold, target_share, calibration)

    def set_threshold(self, threshold, target_share, calibration) -> dict:
        """Set `threshold` from the arguments (see the module docstring); returns the
        calibration file read ({} when none)."""
        threshold, cal = calibrated(self, threshold, target_share, calibration)
        if threshold is None:
            threshold = self.default_threshold
        if threshold is None:
            raise UserError(
                f"router {self.name} needs threshold=X or target_share=S (with calibration=FILE "
                f"from hybridbench calibrate --router {self.name})"
            )
        self.threshold = float(threshold)
        self.target_share = None if target_share is None else float(target_share)
        self.calibration = calibration
        self._calibrated_on = frozenset(cal.get("example_ids", ()))
        return cal

    def token_scores(self, view: StepView) -> torch.Tensor:
        """[k] score of each drafted token (see the module docstring)."""
        raise NotImplementedError

    def checked_scores(self, view: StepView) -> torch.Tensor:
        """`token_scores`, checked to hold one float per drafted token (else one error line)."""

        def error(what: str) -> UserError:
            return UserError(f"router {self.name}: {what}")

        return checked_scores(self.token_scores(view), len(view.draft), error)

    def defer_mask(self, view: StepView) -> torch.Tensor:
        scores = self.checked_scores(view)
        return scores < self.threshold if self.defers_below else scores > self.threshold

    @classmethod
    def sweep_settings(cls, targets: list[float], fixed: dict | None = None) -> list[dict]:
        """`hybridbench sweep`: each target share, calibrated, when the sweep passes
        `--router-arg NAME:calibration=FILE`; else SWEEP_THRESHOLDS (a router without a grid
        needs the file)."""
        if not cls.SWEEP_THRESHOLDS:
            return [{"target_share": t} for t in targets]
        return sweep_targets(targets, fixed, cls.SWEEP_THRESHOLDS)

    @classmethod
    def for_calibration(cls, **args):
        """An instance whose `token_scores` `hybridbench calibrate` reads (its threshold is never
        used), from the router arguments given to calibrate."""
        return cls(**args)

    def calibration_notes(self, engine, scores: list[float]) -> dict:
        """Extra fields for the calibration file this router's scores go into (default none)."""
        return {}

    def describe(self) -> dict:
        out = {"threshold": self.threshold}
        if self.target_share is not None:
            out.update(target_share=self.target_share, calibration=self.calibration)
        return out

    def used_example_ids(self) -> frozenset[str]:
        return self._calibrated_on
