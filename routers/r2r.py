"""R2R's token router (`r2r`): a light network on R2R's inputs, trained on critical divergences.

Roads to Rome (Fu et al. 2025, arXiv 2505.21600) routes to large only the tokens where small's
next token would send the answer down another path. Its router reads, at each drafted token:

- small's last hidden state there;
- small's top-`TOP_K` (100) next-token logits, sorted, here as log-probabilities (a logit's offset
  is arbitrary; the softmax's is not), clipped at `LOGP_FLOOR`;
- the drafted token's embedding: here a learned embedding of its id modulo `buckets` (R2R reads
  small's own input embedding of the token, which a router, never calling a model, cannot reach);

each is projected, the three concatenated, and residual MLP blocks (LayerNorm, a 4x expansion,
GELU, dropout) give the logit (`R2RNet`). Trained (harness/training/r2r.py) on the critical-
divergence labels of harness/training/critical.py, where the verifier is the task's own scorer
(R2R asks an LLM to judge; none of that size runs offline). Its score is P(small's token is good
enough); below the threshold the token is deferred and large writes it, calibrated as every
threshold router's (`hybridbench calibrate --router r2r --checkpoint PATH`).

    hybridbench r2r-labels --task gsm8k --examples 200 --positions 3 --out runs/r2r/labels-gsm8k
    hybridbench train-r2r --task gsm8k --labels runs/r2r/labels-gsm8k/labels.safetensors \\
        --out runs/r2r/gsm8k
    hybridbench calibrate --router r2r --checkpoint runs/r2r/gsm8k/r2r.pt --task gsm8k \\
        --limit 1000 --out runs/r2r/gsm8k/cal.json
    hybridbench run --task gsm8k --router r2r --router-arg path=runs/r2r/gsm8k/r2r.pt \\
        --router-arg target_share=0.2 --router-arg calibration=runs/r2r/gsm8k/cal.json ...
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.core.router import Needs, StepView, tasks_of
from harness.errors import UserError
from harness.files import file_sha256, read_router_checkpoint
from routers.citer import check_hidden_backend
from routers.score import ScoreRouter

TOP_K = 100  # small's top log-probabilities the network reads (R2R: top-100 logits)
LOGP_FLOOR = -30.0  # a -inf logit (a masked token) would poison the network


def top_logprobs(logits: torch.Tensor, k: int = TOP_K) -> torch.Tensor:
    """[n, V] small's logits -> [n, k] its k largest log-probabilities, largest first, clipped at
    LOGP_FLOOR (a vocabulary under k pads with the floor)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    top = logp.topk(min(k, logp.shape[-1]), dim=-1).values.clamp(min=LOGP_FLOOR)
    if top.shape[-1] < k:
        top = torch.nn.functional.pad(top, (0, k - top.shape[-1]), value=LOGP_FLOOR)
    return top


class Block(nn.Module):
    """x + MLP(LayerNorm(x)): a 4x expansion, GELU, dropout (R2R's classifier block)."""

    def __init__(self, width: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(4 * width, width),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class R2RNet(nn.Module):
    """[N, TOP_K] top log-probabilities, [N, H] hidden states, [N] drafted ids -> [N] logits of
    P(small suffices)."""

    def __init__(
        self,
        hidden_size: int,
        top_k: int = TOP_K,
        buckets: int = 4096,
        width: int = 128,
        blocks: int = 2,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.top_k, self.buckets = top_k, buckets
        self.hidden = nn.Sequential(nn.LayerNorm(hidden_size), nn.Linear(hidden_size, width))
        self.logits = nn.Sequential(nn.LayerNorm(top_k), nn.Linear(top_k, width))
        self.token = nn.Embedding(buckets, width)
        self.fuse = nn.Linear(3 * width, width)
        self.blocks = nn.Sequential(*(Block(width, dropout) for _ in range(blocks)))
        self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 1))

    def forward(self, top, hidden, token) -> torch.Tensor:
        parts = [
            self.logits(top.float()),
            self.hidden(hidden.float()),
            self.token(token.long() % self.buckets),
        ]
        return self.head(self.blocks(self.fuse(torch.cat(parts, dim=-1)))).squeeze(-1)


KEYS = ("config", "state_dict", "threshold", "train_ids", "task", "small_backend")


def load_checkpoint(path) -> dict:
    """A checkpoint written by `hybridbench train-r2r` (no pickle): one UserError for a file that
    is missing, of another kind, or lacking what the router reads."""
    ckpt = read_router_checkpoint(path, "r2r")
    missing = [k for k in KEYS if k not in ckpt]
    if missing:
        raise UserError(
            f"{path} is a damaged r2r router checkpoint (no {', '.join(missing)}); "
            "train it again with hybridbench train-r2r"
        )
    return ckpt


def network(ckpt: dict, path="checkpoint") -> R2RNet:
    """The checkpoint's network, in eval mode."""
    net = R2RNet(**ckpt["config"])
    try:
        net.load_state_dict(ckpt["state_dict"])
    except RuntimeError as e:
        reason = str(e).strip().splitlines()[0][:120]
        raise UserError(f"{path}: its weights do not fit its network ({reason})") from None
    return net.eval()


class R2RRouter(ScoreRouter):
    """Defers a drafted token when the network's P(small suffices) is below `threshold`.

    path:         checkpoint from `hybridbench train-r2r`
    threshold:    tau directly (-inf: small only, +inf: large only); default the checkpoint's
                  (the one deferring its training target share of the held-out train tokens)
    target_share, calibration: instead, tau deferring this share of the scores in a calibration
                  file (`hybridbench calibrate --router r2r --checkpoint PATH`)
    draft_len:    tokens small drafts per step (a speed knob: the kept prefix is the same)
    """

    name = "r2r"
    defers_below = True
    checkpoint_arg = "path"
    # Sweep grid of P(small suffices) without a calibration file: 0.5 defers rarely, 0.98 often.
    SWEEP_THRESHOLDS = (0.5, 0.8, 0.9, 0.95, 0.98)

    def __init__(
        self,
        path: str,
        threshold: float | None = None,
        target_share: float | None = None,
        calibration: str | None = None,
        draft_len: int = 1,
    ):
        ckpt = load_checkpoint(path)
        self.path, self.digest = str(path), file_sha256(path)
        self.net = network(ckpt, path)
        self._trained = frozenset(ckpt["train_ids"])
        self.default_threshold = float(ckpt["threshold"])
        cal = self.set_threshold(threshold, target_share, calibration)
        if cal and cal.get("checkpoint_sha256") != self.digest:
            raise UserError(f"{calibration} was made with another checkpoint than {path}")
        if math.isnan(self.threshold):
            raise UserError(f"router r2r: threshold is NaN ({path})")
        if draft_len < 1:
            raise ValueError(f"draft_len must be >= 1, got {draft_len}")
        self.draft_len = int(draft_len)
        self.small_backend = ckpt["small_backend"]

    def needs(self) -> Needs:
        return Needs(draft_len=self.draft_len, small_hidden=True)

    @torch.inference_mode()
    def scores(self, logits: torch.Tensor, draft: torch.Tensor, hidden) -> torch.Tensor:
        """[k, V] small's logits, [k] drafted ids, [k, H] small's hidden states -> [k]
        P(small's token is good enough)."""
        return torch.sigmoid(self.net(top_logprobs(logits, self.net.top_k), hidden, draft))

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
