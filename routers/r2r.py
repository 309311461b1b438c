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

import torch
from torch import nn

from harness.core.router import Needs
from routers.trained import TrainedScoreRouter

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


class R2RRouter(TrainedScoreRouter):
    """Defers a drafted token when the network's P(small suffices) is below `threshold`
    (arguments: `routers.trained.TrainedScoreRouter`; path: a checkpoint from `hybridbench
    train-r2r`)."""

    name = "r2r"
    net_class = R2RNet

    def needs(self) -> Needs:
        return Needs(draft_len=self.draft_len, small_hidden=True)

    @torch.inference_mode()
    def scores(self, logits: torch.Tensor, draft: torch.Tensor, hidden) -> torch.Tensor:
        """[k, V] small's logits, [k] drafted ids, [k, H] small's hidden states -> [k]
        P(small's token is good enough)."""
        return torch.sigmoid(self.net(top_logprobs(logits, self.net.top_k), hidden, draft))
