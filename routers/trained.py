"""The base of the token routers whose scorer is a network trained by a `hybridbench train-KIND`
command (`r2r`, `learned`): the checkpoint read (no pickle), the threshold set from it or from a
calibration file made with this same checkpoint, and the ids it was trained and calibrated on
never evaluated on. A subclass sets `name` and `net_class` and writes `scores`."""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.core.router import StepView, tasks_of
from harness.errors import UserError
from harness.files import file_sha256, read_router_checkpoint
from routers.citer import check_hidden_backend
from routers.score import ScoreRouter

KEYS = ("config", "state_dict", "threshold", "train_ids", "task", "small_backend")


def load_checkpoint(path, kind: str) -> dict:
    """A checkpoint written by `hybridbench train-KIND` (no pickle): one UserError for a file that
    is missing, of another kind, or lacking what the router reads."""
    ckpt = read_router_checkpoint(path, kind)
    missing = [k for k in KEYS if k not in ckpt]
    if missing:
        raise UserError(
            f"{path} is a damaged {kind} router checkpoint (no {', '.join(missing)}); "
            f"train it again with hybridbench train-{kind}"
        )
    return ckpt


def network(net_class: type[nn.Module], ckpt: dict, path="checkpoint") -> nn.Module:
    """The checkpoint's network, in eval mode."""
    net = net_class(**ckpt["config"])
    try:
        net.load_state_dict(ckpt["state_dict"])
    except RuntimeError as e:
        reason = str(e).strip().splitlines()[0][:120]
        raise UserError(f"{path}: its weights do not fit its network ({reason})") from None
    return net.eval()


class TrainedScoreRouter(ScoreRouter):
    """Defers a drafted token when the network's P(small suffices) is below `threshold`.

    path:         checkpoint from `hybridbench train-NAME`
    threshold:    tau directly (-inf: small only, +inf: large only); default the checkpoint's
                  (the one deferring its training target share of the held-out train tokens)
    target_share, calibration: instead, tau deferring this share of the scores in a calibration
                  file (`hybridbench calibrate --router NAME --checkpoint PATH`: small's own
                  calib answers, made with this checkpoint)
    draft_len:    tokens small drafts per step (a speed knob: the kept prefix is the same)
    """

    defers_below = True
    checkpoint_arg = "path"
    # Sweep grid of P(small suffices) without a calibration file: 0.5 defers rarely, 0.98 often.
    SWEEP_THRESHOLDS = (0.5, 0.8, 0.9, 0.95, 0.98)
    net_class: type[nn.Module]  # the network a checkpoint's config builds

    def __init__(
        self,
        path: str,
        threshold: float | None = None,
        target_share: float | None = None,
        calibration: str | None = None,
        draft_len: int = 1,
    ):
        ckpt = load_checkpoint(path, self.name)
        self.path, self.digest = str(path), file_sha256(path)
        self.net = network(self.net_class, ckpt, path)
        self._trained = frozenset(ckpt["train_ids"])
        self.default_threshold = float(ckpt["threshold"])
        cal = self.set_threshold(threshold, target_share, calibration)
        if cal and cal.get("checkpoint_sha256") != self.digest:
            raise UserError(f"{calibration} was made with another checkpoint than {path}")
        if math.isnan(self.threshold):
            raise UserError(f"router {self.name}: threshold is NaN ({path})")
        if draft_len < 1:
            raise ValueError(f"draft_len must be >= 1, got {draft_len}")
        self.draft_len = int(draft_len)
        self.small_backend = ckpt["small_backend"]

    def scores(self, logits: torch.Tensor, draft: torch.Tensor, hidden) -> torch.Tensor:
        """[k, V] small's logits, [k] drafted ids, [k, H] small's hidden states -> [k]
        P(small's token is good enough)."""
        raise NotImplementedError

    def token_scores(self, view: StepView) -> torch.Tensor:
        return self.scores(view.small_logits, view.draft, view.small_hidden)

    def backends(self, engine) -> dict:
        # the features were computed on one backend's numerics; another shifts them (citer.py)
        check_hidden_backend(self.small_backend, engine, self.path)
        return {}

    def describe(self) -> dict:
        return {"path": self.path, **super().describe(), "checkpoint": self.digest[:16]}

    def used_example_ids(self) -> frozenset[str]:
        return self._trained | self._calibrated_on

    def trained_on(self) -> tuple[str, ...]:
        """The tasks of the network's training examples (a calibration on another task's calib
        answers leaves a run there a transfer run)."""
        return tasks_of(self._trained)
