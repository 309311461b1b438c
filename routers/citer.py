"""CITER-style token router (Zheng et al. 2025): an MLP over small's last hidden state.

At each drafted token the MLP reads small's last hidden state and gives P(small's token is good
enough); below the threshold tau the token is deferred and large generates it. The network and
its training follow CITER's released code: hidden H -> 2H -> H -> 1 with BatchNorm, ReLU and
dropout 0.1, a sigmoid output, binary cross-entropy on the token labels of `harness.training.labels`.

    hybridbench train-citer --task gsm8k --out runs/citer          # writes runs/citer/citer.pt
    hybridbench run --task gsm8k --router citer --router-arg path=runs/citer/citer.pt --out ...
    hybridbench run ... --router citer --router-arg path=... --router-arg threshold=0.8
    hybridbench calibrate --router citer --checkpoint runs/citer/citer.pt --task gsm8k --out c.json
    hybridbench run ... --router citer --router-arg path=... --router-arg target_share=0.2 \
        --router-arg calibration=c.json

The checkpoint carries the ids of the examples it was trained and calibrated on; the runner
refuses to evaluate the router on them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch import nn

from harness.core.router import Needs, StepView, tasks_of
from harness.errors import UserError
from harness.files import read_router_checkpoint
from routers.calibration import calibrated, checkpoint_threshold
from routers.score import ScoreRouter


class CiterMLP(nn.Module):
    """CITER's router network: [N, H] hidden states -> [N] logits of P(small suffices)."""

    def __init__(self, hidden_size: int, dropout: float = 0.1):
        super().__init__()
        h = hidden_size
        self.net = nn.Sequential(
            nn.Linear(h, 2 * h),
            nn.BatchNorm1d(2 * h),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(2 * h, h),
            nn.BatchNorm1d(h),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(h, 1),
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.net(hidden.float()).squeeze(-1)


def load_checkpoint(path: str | Path, kind: str) -> dict:
    """A router checkpoint written by `harness.training.citer` / `.query` (no pickle)."""
    return read_router_checkpoint(path, kind)


def backend_family(info) -> str:
    """The backend of a ModelInfo without its version: "hf", "llama.cpp" or "remote"."""
    return (getattr(info, "backend", "") or "hf").split()[0]


def check_hidden_backend(trained: str, engine, path) -> None:
    """A router trained on small's hidden states from one backend reads them from the same one.

    transformers on the dequantized bf16 copy and llama.cpp on the quantized file compute the
    same function up to numerics (llama.cpp quantizes activations in its matrix products), so
    the hidden states, and the thresholds calibrated on them, differ: refused rather than
    silently shifted. Checkpoints from before backends were recorded were made on "hf"."""
    now = backend_family(engine.backends["small"].info)
    if trained != now:
        raise UserError(
            f"{path} was trained on small's hidden states from the {trained} backend, but small "
            f"runs on {now}: run with --small-backend {trained}, or retrain on {now}"
        )


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


class Citer(ScoreRouter):
    """Defers a drafted token when the MLP's P(small suffices) is below `threshold`.

    path:      checkpoint from `hybridbench train-citer`
    share:     re-calibrate tau to defer this share of the calib tokens (the checkpoint keeps
               its scores on calib; default: the share it was trained for). In reference mode
               those tokens are the calib reference answers, not small's own: the share realized
               where small writes differs (benchmarks/citer_shift.py measures it)
    target_share, calibration: tau deferring this share of the scores in a calibration file
               (`hybridbench calibrate --router citer`: small's own calib answers, as the other
               threshold routers; made with the same checkpoint)
    threshold: tau directly (overrides share); default the one calibrated on the calib split
    draft_len: tokens small drafts per step (a speed knob: the kept prefix is the same)
    """

    name = "citer"
    defers_below = True
    checkpoint_arg = "path"

    def __init__(
        self,
        path: str,
        share: float | None = None,
        threshold: float | None = None,
        draft_len: int = 1,
        target_share: float | None = None,
        calibration: str | None = None,
    ):
        ckpt = load_checkpoint(path, "citer")
        self.path, self.digest = str(path), file_digest(path)
        self.mlp = CiterMLP(ckpt["hidden_size"])
        self.mlp.load_state_dict(ckpt["state_dict"])
        self.mlp.eval()
        if target_share is not None and share is not None:
            raise UserError("router citer takes share=S (checkpoint) or target_share=S, not both")
        self.target_share, self.calibration, cal_ids = None, calibration, ()
        if target_share is not None:
            threshold, cal = calibrated(self, threshold, target_share, calibration)
            if str(cal.get("checkpoint_sha256", ""))[:16] != self.digest:
                raise UserError(f"{calibration} was made with another checkpoint than {path}")
            self.target_share, cal_ids = float(target_share), cal.get("example_ids", ())
        self.share, self.threshold = checkpoint_threshold(
            ckpt, path, share, threshold, "target_share"
        )
        if self.target_share is not None:
            self.share = None  # tau comes from the calibration file, not the checkpoint's scores
        if draft_len < 1:
            raise ValueError(f"draft_len must be >= 1, got {draft_len}")
        self.draft_len = draft_len
        self._trained = frozenset(ckpt["train_ids"]) | frozenset(ckpt["calib_ids"])
        self._used = self._trained | set(cal_ids)
        self.small_backend = ckpt.get("small_backend", "hf")  # older checkpoints: transformers

    def needs(self) -> Needs:
        return Needs(draft_len=self.draft_len, small_hidden=True, small_logits="argmax")

    @torch.inference_mode()
    def scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """[k, H] -> [k] P(small's token is good enough)."""
        return torch.sigmoid(self.mlp(hidden))

    def token_scores(self, view: StepView) -> torch.Tensor:
        return self.scores(view.small_hidden)

    def backends(self, engine) -> dict:
        check_hidden_backend(self.small_backend, engine, self.path)
        return {}

    def describe(self) -> dict:
        if self.target_share is None:  # (the keys and order of runs made before target_share)
            return {
                "path": self.path,
                "share": self.share,
                "threshold": self.threshold,
                "checkpoint": self.digest,
            }
        return {
            "path": self.path,
            "target_share": self.target_share,
            "calibration": self.calibration,
            "threshold": self.threshold,
            "checkpoint": self.digest,
        }

    @classmethod
    def sweep_settings(cls, targets: list[float], fixed: dict | None = None) -> list[dict]:
        """`hybridbench sweep`: tau re-calibrated to defer each target share of calib tokens: of
        a calibration file's scores when the sweep passes `calibration=FILE`, else of the
        checkpoint's own; a checkpoint trained before `share=` existed (no calib scores) runs
        once, at its tau."""
        if (fixed or {}).get("calibration"):
            return [{"target_share": t} for t in targets]
        path = (fixed or {}).get("path")
        if path and "calib_scores" not in load_checkpoint(path, "citer"):
            return [{}]
        return [{"share": t} for t in targets]

    def used_example_ids(self) -> frozenset[str]:
        return self._used

    def trained_on(self) -> tuple[str, ...]:
        """The tasks of the MLP's training examples: a threshold calibrated on another task's
        calib answers (humaneval's rows run mbpp's MLP) leaves the run a transfer run."""
        return tasks_of(self._trained)
