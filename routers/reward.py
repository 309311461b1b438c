"""The reward-token router of the seed paper (reward-token-routing-paper.txt, sections 2.1-2.2).

A small reward model scores every token small proposes; a token scoring at or above `threshold`
is accepted, otherwise it is discarded and large generates that token. This module holds the
policy (`RewardRouter`, registered as `reward`); the reward model itself, its checkpoints and the
backends that run it are in `harness.backends.reward_model`, loaded by the engine when the router
asks for it (`backends`). Checkpoints are written by `hybridbench train-reward`, calibration
files by `hybridbench calibrate --router reward` (a score router: `routers.score`).

    hybridbench run --task gsm8k --router reward \\
        --router-arg checkpoint=runs/reward/model/reward.pt --router-arg threshold=1.0 ...
    hybridbench run --task gsm8k --router reward --router-arg checkpoint=.../reward.pt \\
        --router-arg target_share=0.3 --router-arg calibration=runs/reward/calib-gsm8k.json ...

The head has no bias (like transformers' sequence-classification heads the paper's RLHF recipe
uses): a pairwise loss only sees score differences, so an offset could not be learned anyway.
Absolute thresholds therefore mean something only for one trained checkpoint; the paper's
1.0 ... 4.0 are on the paper's own scale. `target_share` + a calibration file is the portable knob.
"""

from __future__ import annotations

import math

import torch

from harness.core.router import Needs, StepView, tasks_of
from harness.errors import UserError
from harness.files import file_sha256
from harness.files import read_reward_checkpoint as read_checkpoint
from routers.calibration import calibrated_threshold, read_calibration  # noqa: F401
from routers.score import ScoreRouter


class RewardRouter(ScoreRouter):
    """Accept small's token when its reward score >= threshold, else large generates it.

    checkpoint    reward model from `hybridbench train-reward` (needed to run from the CLI)
    threshold     score below which a token is deferred (-inf: small only, +inf: large only)
    target_share  instead of threshold: the share of tokens to defer on the calibration split,
                  turned into a threshold with the scores of `calibration` (same checkpoint)
    draft_len     tokens small drafts per step; a speed knob, not a policy change (TokenRouter)
    """

    name = "reward"
    defers_below = True
    checkpoint_arg = "checkpoint"

    def __init__(
        self,
        checkpoint: str | None = None,
        threshold: float | None = None,
        target_share: float | None = None,
        calibration: str | None = None,
        draft_len: int = 1,
    ):
        if draft_len < 1:
            raise UserError(f"router reward: draft_len must be >= 1, got {draft_len}")
        self.checkpoint, self.draft_len = checkpoint, int(draft_len)
        self._trained: frozenset[str] = frozenset()  # the head's training prompts
        sha = ""
        if checkpoint:
            ck = read_checkpoint(checkpoint)
            self._trained = frozenset(ck.get("used_example_ids", ()))
            sha = file_sha256(checkpoint)
        cal = self.set_threshold(threshold, target_share, calibration)
        if cal and sha and cal.get("checkpoint_sha256") != sha:
            raise UserError(f"{calibration} was made with another checkpoint than {checkpoint}")

    @classmethod
    def for_calibration(cls, **args):
        """A reward router whose scores calibrate reads: no threshold is needed for that."""
        return cls(**{"threshold": math.inf, **args})

    def needs(self) -> Needs:
        return Needs(draft_len=self.draft_len, reward=True, small_logits="argmax")

    def token_scores(self, view: StepView) -> torch.Tensor:
        return view.reward

    def backends(self, engine) -> dict:
        """The models this router brings besides the pair: {"reward": its backend}
        (`harness.backends.reward_model.reward_backend_for`: llama.cpp beside a llama.cpp small
        model, else transformers on small's device). Called by
        `harness.backends.engine.engine_from_args`."""
        if not self.checkpoint:
            raise UserError(
                "router reward needs checkpoint=PATH (made by hybridbench train-reward)"
            )
        return {"reward": engine.reward_backend(self.checkpoint)}

    def calibration_notes(self, engine, scores: list[float]) -> dict:
        """The reward backbone that scored (the one the router runs beside this small model)
        and the share of calib tokens below each of the seed paper's thresholds."""
        backend = engine.backends["reward"].info.backend or "transformers"
        shares = {str(t): share_below(scores, t) for t in PAPER_THRESHOLDS}
        return {"reward_backend": backend, "paper_threshold_shares": shares}

    def describe(self) -> dict:
        out = {
            "threshold": self.threshold,
            "checkpoint": self.checkpoint,
            "draft_len": self.draft_len,
        }
        if self.target_share is not None:
            out.update(target_share=self.target_share, calibration=self.calibration)
        return out

    def used_example_ids(self) -> frozenset[str]:
        return self._trained | self._calibrated_on

    def trained_on(self) -> tuple[str, ...]:
        """The tasks of the reward head's training prompts: a threshold calibrated on another
        task's calib answers (humaneval's rows) leaves the run a transfer run."""
        return tasks_of(self._trained)


PAPER_THRESHOLDS = (1.0, 1.5, 2.0, 4.0)  # the seed paper's reward thresholds


def share_below(scores, threshold: float) -> float:
    """Share of `scores` strictly below `threshold` (what the router would defer); NaN if none."""
    return sum(s < threshold for s in scores) / len(scores) if len(scores) else math.nan
