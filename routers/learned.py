"""A trained token router that reads what the thresholds read, and more (`learned`).

At each drafted token a small network reads three things about it and gives P(small's token is
good enough); below the threshold the token is deferred and large generates it:

- small's next-token distribution there (`distribution_features`): its entropy in nats (what
  the `entropy` router reads), its top-1 probability (what `confidence` reads), the top-1 minus
  top-2 probability margin, the log-probability of the drafted token and the top
  `TOP_LOGPROBS` log-probabilities;
- small's last hidden state there (what `citer` reads);
- the drafted token, as a learned embedding of its id modulo `buckets`.

This is the input of R2R's router (Fu et al. 2025: small's top logits, last hidden state and the
token's embedding, fused by an MLP), on this project's labels. Each part is projected to `width`,
the parts concatenated and an MLP gives the logit (`LearnedNet`); a checkpoint may use a subset
of the parts (`inputs`), e.g. the distribution alone, to tell what each adds.

    hybridbench train-learned --task gsm8k --out runs/learned \\
        --labels results/train13/citer-lf-gsm8k/labels_r1.safetensors
    hybridbench calibrate --router learned --checkpoint runs/learned/learned.pt --task gsm8k \\
        --records runs/gsm8k-calib-small/records.jsonl --limit 1000 --out runs/learned/cal.json
    hybridbench run --task gsm8k --router learned --router-arg path=runs/learned/learned.pt \\
        --router-arg target_share=0.2 --router-arg calibration=runs/learned/cal.json ...

`harness.training.learned` makes the features and trains the network; the checkpoint keeps the
ids of the examples it learned from, and the runner refuses to evaluate the router on them.
"""

from __future__ import annotations

import torch
from torch import nn

from harness.core.router import Needs
from routers.baselines import top_probability
from routers.trained import TrainedScoreRouter

TOP_LOGPROBS = 5  # top log-probabilities of small's distribution among the features
LOGP_FLOOR = -30.0  # log-probabilities are clipped here: a -inf logit would poison the network
FEATURES = (
    "entropy",  # nats, as routers.baselines.entropy
    "top1_prob",  # as routers.baselines.top_probability
    "margin",  # top-1 minus top-2 probability
    "draft_logprob",  # log q(drafted token): at temperature 0 the top-1 log-probability
    *(f"top{i + 1}_logprob" for i in range(TOP_LOGPROBS)),
)
INPUTS = ("dist", "hidden", "token")  # what a network may read: distribution, hidden, token


def distribution_features(logits: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """Small's next-token distribution at each drafted token, [k, V] logits and [k] drafted ids
    -> [k, len(FEATURES)] float32, columns named by FEATURES. Column 0 is exactly what the
    `entropy` router thresholds, column 1 what `confidence` thresholds (finite also where a
    logit is -inf)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    # routers.baselines.entropy's arithmetic, with 0 log 0 = 0 where a logit is -inf (masked)
    ent = -(logp.exp() * logp).nan_to_num(0.0).sum(-1)
    top = logp.topk(TOP_LOGPROBS, dim=-1).values.clamp(min=LOGP_FLOOR)
    top_p = top.exp()
    drafted = logp.gather(-1, draft.long().view(-1, 1)).squeeze(-1).clamp(min=LOGP_FLOOR)
    cols = [ent, top_probability(logits), top_p[:, 0] - top_p[:, 1], drafted]
    return torch.cat([torch.stack(cols, dim=-1), top], dim=-1)


class LearnedNet(nn.Module):
    """[N, F] distribution features, [N, H] hidden states, [N] drafted ids -> [N] logits of
    P(small suffices). Only the parts named in `inputs` are read; the others may be None.

    The distribution features are standardised with the training rows' mean and std (buffers,
    saved with the weights); the hidden state goes through a LayerNorm first."""

    def __init__(
        self,
        inputs: tuple[str, ...],
        hidden_size: int,
        buckets: int = 4096,
        width: int = 128,
        dropout: float = 0.1,
    ):
        super().__init__()
        bad = sorted(set(inputs) - set(INPUTS))
        if bad or not inputs:
            raise ValueError(f"inputs must be a non-empty subset of {INPUTS}, got {inputs}")
        self.inputs, self.buckets = tuple(i for i in INPUTS if i in inputs), buckets
        n = len(FEATURES)
        self.register_buffer("feature_mean", torch.zeros(n))
        self.register_buffer("feature_std", torch.ones(n))
        parts = {
            "dist": lambda: nn.Sequential(nn.Linear(n, width), nn.GELU()),
            "hidden": lambda: nn.Sequential(
                nn.LayerNorm(hidden_size), nn.Linear(hidden_size, width), nn.GELU()
            ),
            "token": lambda: nn.Embedding(buckets, width),
        }
        self.parts = nn.ModuleDict({name: parts[name]() for name in self.inputs})
        self.head = nn.Sequential(
            nn.Linear(width * len(self.inputs), width),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(width, 1),
        )

    def forward(self, dist, hidden, token) -> torch.Tensor:
        given = {"dist": dist, "hidden": hidden, "token": token}
        xs = []
        for name in self.inputs:
            x = given[name]
            if name == "dist":
                x = (x.float() - self.feature_mean) / self.feature_std
            elif name == "hidden":
                x = x.float()
            else:
                x = x.long() % self.buckets
            xs.append(self.parts[name](x))
        return self.head(torch.cat(xs, dim=-1)).squeeze(-1)


class LearnedRouter(TrainedScoreRouter):
    """Defers a drafted token when the network's P(small suffices) is below `threshold`
    (arguments: `routers.trained.TrainedScoreRouter`; path: a checkpoint from `hybridbench
    train-learned`)."""

    name = "learned"
    net_class = LearnedNet

    @property
    def inputs(self) -> tuple[str, ...]:
        """What the checkpoint's network reads (a subset of INPUTS)."""
        return self.net.inputs

    def needs(self) -> Needs:
        return Needs(draft_len=self.draft_len, small_hidden="hidden" in self.inputs)

    @torch.inference_mode()
    def scores(self, logits: torch.Tensor, draft: torch.Tensor, hidden=None) -> torch.Tensor:
        """[k, V] small's logits, [k] drafted ids, [k, H] small's hidden states (or None when
        the network does not read them) -> [k] P(small's token is good enough)."""
        dist = distribution_features(logits, draft) if "dist" in self.inputs else None
        return torch.sigmoid(self.net(dist, hidden, draft))
