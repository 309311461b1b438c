"""The reward-token router of the seed paper (reward-token-routing-paper.txt, sections 2.1-2.2).

A small reward model scores every token small proposes; a token scoring at or above `threshold`
is accepted, otherwise it is discarded and large generates that token. This module holds the
policy (`RewardRouter`, registered as `reward`); the reward model itself, its checkpoints and the
backends that run it are in `harness.backends.reward_model`, loaded by the engine when the router
asks for it (`backends`). Checkpoints are written by `hybridbench train-reward`, calibration
files by `hybridbench calibrate-reward`.

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

import torch

from harness.core.router import Needs, StepView, TokenRouter, tasks_of
from harness.errors import UserError
from harness.files import file_sha256
from harness.files import read_reward_checkpoint as read_checkpoint
from routers.calibration import calibrated, calibrated_threshold, read_calibration  # noqa: F401


class RewardRouter(TokenRouter):
    """Accept small's token when its reward score >= threshold, else large generates it.

    checkpoint    reward model from `hybridbench train-reward` (needed to run from the CLI)
    threshold     score below which a token is deferred (-inf: small only, +inf: large only)
    target_share  instead of threshold: the share of tokens to defer on the calibration split,
                  turned into a threshold with the scores of `calibration` (same checkpoint)
    draft_len     tokens small drafts per step; a speed knob, not a policy change (TokenRouter)
    """

    name = "reward"

    def __init__(
        self,
        checkpoint: str | None = None,
        threshold: float | None = None,
        target_share: float | None = None,
        calibration: str | None = None,
        draft_len: int = 1,
    ):
        if threshold is None and target_share is None:
            raise UserError("router reward needs threshold=X or target_share=S (one of them)")
        if draft_len < 1:
            raise UserError(f"router reward: draft_len must be >= 1, got {draft_len}")
        self.checkpoint, self.draft_len, self.target_share = checkpoint, int(draft_len), None
        self._ids: frozenset[str] = frozenset()
        sha = ""
        if checkpoint:
            ck = read_checkpoint(checkpoint)
            self._ids = frozenset(ck.get("used_example_ids", ()))
            sha = file_sha256(checkpoint)
        self._trained = self._ids  # the head's training prompts; calibration adds to _ids only
        self.calibration = calibration
        threshold, cal = calibrated("reward", threshold, target_share, calibration)
        if cal:
            if sha and cal.get("checkpoint_sha256") != sha:
                raise UserError(f"{calibration} was made with another checkpoint than {checkpoint}")
            self._ids |= frozenset(cal.get("example_ids", ()))
            self.target_share = float(target_share)
        self.threshold = float(threshold)

    def needs(self) -> Needs:
        return Needs(draft_len=self.draft_len, reward=True)

    def defer_mask(self, view: StepView) -> torch.Tensor:
        return view.reward < self.threshold

    def backends(self, engine) -> dict:
        """The models this router brings besides the pair: {"reward": its backend}
        (`harness.backends.reward_model.reward_backend_for`: llama.cpp beside a llama.cpp small model, else transformers on
        small's device). Called by `harness.backends.engine.engine_from_args`."""
        if not self.checkpoint:
            raise UserError(
                "router reward needs checkpoint=PATH (made by hybridbench train-reward)"
            )
        return {"reward": engine.reward_backend(self.checkpoint)}

    @classmethod
    def sweep_settings(cls, targets: list[float], fixed: dict | None = None) -> list[dict]:
        """`hybridbench sweep`: one calibrated threshold per target large-token share; the sweep
        must also pass `--router-arg reward:calibration=FILE`."""
        return [{"target_share": t} for t in targets]

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
        return self._ids

    def trained_on(self) -> tuple[str, ...]:
        """The tasks of the reward head's training prompts: a threshold calibrated on another
        task's calib answers (humaneval's rows) leaves the run a transfer run."""
        return tasks_of(self._trained)
