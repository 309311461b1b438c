"""What a model call returns of its next-token logits: the full rows, or a few numbers per row.

A row of the default pair's logits holds 151,936 floats. Greedy decoding reads one number of it
(the argmax) and the training-free routers a few more (entropy, top-1 probability), so copying,
converting and scanning every row on the host every step is work nobody reads (on a GPU it is a
device-to-host copy of 0.6 MB a row). The core asks each call for one of three outputs:

    "full"    the rows, [n, V] float32 on the CPU: sampling at temperature > 0, and routers
              that read q or p themselves (speculative decoding, the oracle)
    "stats"   a `TokenStats` of n rows: argmax, top-1 probability, entropy, top-2 margin
    "argmax"  a `TokenStats` holding the argmax only (greedy decoding, routers that read nothing)

A backend that can (`summarizes = True`: llama.cpp from its own output buffer, transformers on
the model's device) returns the summary itself; for any other the core summarizes the rows it
returns (`at_level`), so every backend serves every level with the same numbers up to float
rounding (`token_stats` computes them as `routers.baselines`' entropy and top probability do).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from harness.core.sampling import sample

FULL, STATS, ARGMAX = "full", "stats", "argmax"
LEVELS = (ARGMAX, STATS, FULL)  # each level holds everything the ones before it hold


@dataclass(frozen=True)
class TokenStats:
    """A few numbers per row of next-token logits (CPU tensors; n rows, or 0-d for one row)."""

    argmax: torch.Tensor  # [n] long: the most likely token (the first one on ties)
    top_prob: torch.Tensor | None = None  # [n] float32: its softmax probability (None: argmax)
    entropy: torch.Tensor | None = None  # [n] float32: entropy of softmax(logits), nats
    margin: torch.Tensor | None = None  # [n] float32: top-1 minus top-2 probability

    @property
    def level(self) -> str:
        return ARGMAX if self.top_prob is None else STATS

    def __len__(self) -> int:
        return len(self.argmax)

    def __getitem__(self, index) -> TokenStats:
        """Rows of every field, indexed as a tensor is (`stats[-1]`, `stats[2:]`, `stats[None]`)."""
        return TokenStats(
            *(_apply(getattr(self, f.name), lambda t: t[index]) for f in fields(self))
        )


def _apply(t, fn):
    return None if t is None else fn(t)


def summary_tensors(logits: torch.Tensor, level: str = STATS) -> tuple[torch.Tensor, ...]:
    """The fields of `TokenStats` for [n, V] logits, left on their device: (argmax,) at level
    "argmax", else (argmax, top-1 probability, entropy, top-2 margin). Entropy and top
    probability are computed as `routers.baselines.entropy` and `top_probability` compute them
    from the same rows, so the two agree exactly."""
    x = logits.float()
    arg = x.argmax(-1)
    if level == ARGMAX:
        return (arg,)
    logp = torch.log_softmax(x, dim=-1)
    ent = -(logp.exp() * logp).sum(-1)
    top2 = torch.softmax(x, -1).topk(min(2, x.shape[-1]), dim=-1).values
    second = top2[..., -1] if top2.shape[-1] > 1 else torch.zeros_like(top2[..., 0])
    return (arg, top2[..., 0], ent, top2[..., 0] - second)


def token_stats(logits: torch.Tensor, level: str = STATS) -> TokenStats:
    """`TokenStats` of [n, V] logits, computed on their device; one copy of n x 4 numbers to
    the CPU (`summary_tensors`)."""
    t = summary_tensors(logits, level)
    if level == ARGMAX:
        return TokenStats(t[0].cpu())
    host = torch.stack([f.float() for f in t]).cpu()
    return TokenStats(host[0].long(), host[1], host[2], host[3])


def level_for(reads: str, temperature: float) -> str:
    """The level to ask a model for when its reader reads `reads` of it (`Needs.small_logits`:
    "full", "stats" or "argmax"): sampling at temperature > 0 reads the full rows."""
    if temperature > 0 or reads == "full":
        return FULL
    return STATS if reads == "stats" else ARGMAX


def at_level(out, level: str):
    """`out` (rows or a `TokenStats`) as `level` asks: rows summarized when a summary is asked
    for; a summary that holds less than `level` is an error (the backend ignored the request)."""
    if isinstance(out, torch.Tensor):
        return out if level == FULL else token_stats(out, level)
    if LEVELS.index(out.level) < LEVELS.index(level):
        raise RuntimeError(f"a backend returned {out.level!r} outputs where {level!r} was asked")
    return out


def holds(out, level: str) -> bool:
    """Whether `out` (rows or a `TokenStats`) holds what `level` asks for."""
    have = FULL if isinstance(out, torch.Tensor) else out.level
    return LEVELS.index(have) >= LEVELS.index(level)


def stack(rows: list):
    """One-row outputs (tensors [V] or 0-d `TokenStats`) stacked into [k] rows."""
    if isinstance(rows[0], torch.Tensor):
        return torch.stack(rows)
    return TokenStats(
        *(
            None
            if getattr(rows[0], f.name) is None
            else torch.stack([getattr(r, f.name) for r in rows])
            for f in fields(TokenStats)
        )
    )


def next_token(row, temperature: float, top_p: float, gen: torch.Generator) -> int:
    """The token the core emits from one row: `sample` from full logits, else (greedy) the
    summary's argmax, which is `sample`'s choice at temperature 0."""
    if isinstance(row, torch.Tensor):
        return sample(row, temperature, top_p, gen)
    if temperature > 0:
        raise RuntimeError("sampling at temperature > 0 needs the full logits")
    return int(row.argmax)
