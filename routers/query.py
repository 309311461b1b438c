"""Query-level routers (Hybrid LLM, Ding et al. 2024; RouteLLM, Ong et al. 2024): one decision per
prompt, then the whole answer comes from small or from large.

`query`: a logistic regression over small's mean-pooled prompt hidden state (small's prefill,
which the answer reuses when small answers, so the feature costs nothing extra) predicts whether
small's answer will be correct; prompts scoring below tau go to large. tau is the `share`
quantile of the scores on the calib split (RouteLLM's calibration), so about that share of
prompts goes to large.

`random_query`: each prompt goes to large with probability p (the control at a matched share).

    hybridbench train-query --task gsm8k --share 0.3 --out runs/query      # runs/query/query.pt
    hybridbench run --task gsm8k --router query --router-arg path=runs/query/query.pt --out ...
    hybridbench run ... --router query --router-arg path=... --router-arg share=0.5
    hybridbench run ... --router random_query --router-arg p=0.3
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from harness.core.router import Needs, QueryView, Router
from routers.calibration import checkpoint_threshold
from routers.citer import check_hidden_backend, file_digest, load_checkpoint


class QueryClassifier(nn.Module):
    """Standardize the [*, H] feature with train-split statistics, then one linear layer:
    logit of P(small's answer is correct)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(hidden_size))
        self.register_buffer("std", torch.ones(hidden_size))
        self.linear = nn.Linear(hidden_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear((x.float() - self.mean) / self.std).squeeze(-1)


class QueryRouter(Router):
    """Sends a prompt to large when P(small answers correctly) < tau.

    path:      checkpoint from `hybridbench train-query`
    share:     re-calibrate tau to send this share of the calib prompts to large
    threshold: set tau directly (overrides share)
    """

    name = "query"

    def __init__(self, path: str, share: float | None = None, threshold: float | None = None):
        ckpt = load_checkpoint(path, "query")
        self.path, self.digest = str(path), file_digest(path)
        self.clf = QueryClassifier(ckpt["hidden_size"])
        self.clf.load_state_dict(ckpt["state_dict"])
        self.clf.eval()
        self.share, self.threshold = checkpoint_threshold(ckpt, path, share, threshold, "share")
        self._used = frozenset(ckpt["train_ids"]) | frozenset(ckpt["calib_ids"])
        self.small_backend = ckpt.get("small_backend", "hf")  # older checkpoints: transformers

    def needs(self) -> Needs:
        return Needs(query=True)

    def backends(self, engine) -> dict:
        check_hidden_backend(self.small_backend, engine, self.path)
        return {}

    @torch.inference_mode()
    def score(self, prompt_hidden: torch.Tensor) -> float:
        """P(small's answer is correct) for one prompt's pooled hidden state [H]."""
        return float(torch.sigmoid(self.clf(prompt_hidden)))

    def route_query(self, view: QueryView) -> bool:
        return self.score(view.prompt_hidden) < self.threshold

    @classmethod
    def sweep_settings(cls, targets: list[float], fixed: dict | None = None) -> list[dict]:
        """`hybridbench sweep`: tau re-calibrated to send each target share of calib prompts."""
        return [{"share": t} for t in targets]

    def describe(self) -> dict:
        return {
            "path": self.path,
            "share": self.share,
            "threshold": self.threshold,
            "checkpoint": self.digest,
        }

    def used_example_ids(self) -> frozenset[str]:
        return self._used


class RandomQuery(Router):
    """Each prompt goes to large with probability p.

    The core seeds every generation's RNG with the same run seed, so its first draw alone would
    send all prompts the same way; the draw is shifted by a hash of the prompt's tokens
    (u = (draw + hash) mod 1, still uniform), which makes it differ across prompts and stay
    reproducible for a given seed.
    """

    name = "random_query"

    def __init__(self, p: float = 0.3):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p = p

    def needs(self) -> Needs:
        return Needs(query=True)

    def route_query(self, view: QueryView) -> bool:
        draw = float(torch.rand((), generator=view.generator))
        digest = hashlib.sha256(view.prompt_ids.to(torch.int64).numpy().tobytes()).digest()
        return (draw + int.from_bytes(digest[:8], "big") / 2**64) % 1.0 < self.p

    @classmethod
    def sweep_settings(cls, targets: list[float], fixed: dict | None = None) -> list[dict]:
        """`hybridbench sweep`: one setting per target share of prompts, p = the target."""
        return [{"p": t} for t in targets]

    def describe(self) -> dict:
        return {"p": self.p}
