"""The decoding core: one loop for every router (small-only, large-only, per-token, speculative).

Every model keeps a KV cache for the whole generation. Each model's cache holds a prefix of the
token sequence; when a model is consulted it catches up on the tokens it has not seen in ONE
batched forward pass (`catch_up`), and a rejected draft is undone by cropping caches (`rollback`).
A router never calls a model: it says what it needs (`harness.core.router.Needs`) and decides.

The loop (`decode_steps`) is the logic of ONE generation and never runs a model itself: it yields
each model call it needs (a `Call`) and is sent back the outputs. Two drivers run it:

    generate(models, router, ids, cfg)       one generation; each call runs as it comes
    generate_many(slots, jobs)               up to len(slots) generations in flight; the calls
                                             they wait on are grouped by model and each group
                                             runs as ONE batched call (llama.cpp: one
                                             llama_decode over several sequence ids)

Both live in `harness.core.scheduler`; this module holds the loop and its phases.

A generation's tokens depend only on the outputs it is sent, so batching changes what it emits
only where a backend's batched kernels change logits (llama.cpp: float rounding, which can flip
a near-tie). B = 1 is `generate` exactly.

Run it:  hybridbench generate --router oracle --prompt "What is 7*6?"
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import torch

from harness.core.backend import Backend
from harness.core.records import ForwardRecord, Generation, StepRecord
from harness.core.reuse import reused_answer
from harness.core.router import Decision, LargeOnly, QueryView, Router, SmallOnly, StepView
from harness.core.stats import ARGMAX, FULL, at_level, holds, level_for, next_token, stack


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode one prompt."""

    max_new_tokens: int = 256  # hard cap on emitted tokens
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0  # nucleus mass when sampling
    seed: int = 0  # seeds the generation's RNG (sampling and routers)
    stop: tuple[str, ...] = ()  # stop strings; the completion is cut before the first one
    eos_ids: tuple[int, ...] = ()  # token ids that end the generation (not emitted)


@dataclass
class Call:
    """One model call a generation waits on: `backend.forward(ids, n_rows, hidden)`, whose
    outputs the generation reads at `level` (`harness.core.stats`: full rows or a summary)."""

    backend: Backend
    ids: list[int]
    n_rows: int
    hidden: bool
    level: str = FULL


# What a decode loop is: it yields Calls, is sent (outputs, hidden, seconds), returns a Generation.
DecodeSteps = Generator[Call, tuple, "Generation"]


@dataclass
class GenerationState:
    """Mutable state of one generation; lives only inside `generate`."""

    models: dict[str, Backend]
    tokens: list[int]  # prompt + emitted tokens
    n_prompt: int
    clock: Callable[[], float]
    provenance: list[int] = field(default_factory=list)
    forwards: list[ForwardRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    # role -> (cache length, last row's output, its hidden state or None): what a model's last
    # pass returned at the end of its cache, so asking again for that row costs no pass
    last: dict = field(default_factory=dict)


def catch_up(
    run: GenerationState,
    role: str,
    seq: list[int],
    n_rows: int,
    hidden: bool = False,
    phase: str = "",
    level: str = FULL,
):
    """One forward pass of `role` over the tokens of `seq` it has not cached yet.

    Returns its outputs at the last `n_rows` positions of `seq` at `level` (full rows or a
    `TokenStats`, `harness.core.stats`), and the hidden states there.
    When the cache already holds more than `len(seq) - n_rows` tokens it is cropped first, so
    the pass always re-reads at least the rows asked for, unless only the last row is asked for
    and the model's previous pass ended exactly there (e.g. small's first token after a query
    router's prefill): then that pass's last row is returned and no pass runs.
    """
    m = run.models[role]
    memo = run.last.get(role)
    fresh = memo and memo[0] == m.length == len(seq) and (memo[2] is not None or not hidden)
    if n_rows == 1 and fresh and holds(memo[1], level):
        return at_level(memo[1][None], level), (memo[2][None] if hidden else None)
    m.crop(min(m.length, len(seq) - n_rows))
    before, new = m.length, seq[m.length :]
    phase = "prefill" if before == 0 else phase or _PHASE[role]
    out, h, seconds = yield Call(m, new, n_rows, hidden, level)
    out = at_level(out, level)
    run.forwards.append(ForwardRecord(role, phase, len(new), before, seconds))
    run.last[role] = (m.length, out[-1], None if h is None else h[-1])
    return out, h


_PHASE = {"small": "draft", "large": "catch_up", "reward": "score", "router": "score"}


def draft(run: GenerationState, k: int, cfg: DecodeConfig, gen, hidden: bool, level: str):
    """Small proposes up to k tokens; stops early at EOS. The last token is not fed yet.
    Returns the tokens, small's outputs that chose them at `level`, and its hidden states."""
    toks, rows, hids = [], [], []
    for _ in range(k):
        out, h = yield from catch_up(run, "small", run.tokens + toks, 1, hidden, level=level)
        toks.append(next_token(out[0], cfg.temperature, cfg.top_p, gen))
        rows.append(out[0])
        hids.append(h[0] if hidden else None)
        if toks[-1] in cfg.eos_ids:
            break
    return (
        torch.tensor(toks, dtype=torch.long),
        stack(rows),
        torch.stack(hids) if hidden else None,
    )


def verify(run: GenerationState, draft_ids: torch.Tensor) -> torch.Tensor:
    """Large over the prefix it has not seen plus the whole draft, in one pass: k+1 rows of p."""
    seq = run.tokens + draft_ids.tolist()
    out, _ = yield from catch_up(run, "large", seq, len(draft_ids) + 1, phase="verify")
    return out


def score(run: GenerationState, draft_ids: torch.Tensor, level: str) -> torch.Tensor:
    """Reward of each drafted token, from the reward model's own incremental cache; or, for a
    reward head on small itself (`reads_small`), from small's pass over the draft, whose last
    row small's next draft reuses when the draft is kept (`catch_up`; read at `level`)."""
    seq, k = run.tokens + draft_ids.tolist(), len(draft_ids)
    rm = run.models["reward"]
    if getattr(rm, "reads_small", False):
        _, h = yield from catch_up(run, "small", seq, k, True, "score", level)
        return rm.score(h)
    out, _ = yield from catch_up(run, "reward", seq, k)
    return out[:, 0]


def rollback(run: GenerationState, n_valid: int) -> None:
    """Crop every cache that has read past the first `n_valid` tokens of the new sequence."""
    for m in run.models.values():
        m.crop(min(m.length, n_valid))


def route_query(run: GenerationState, router: Router, gen, temperature: float) -> str:
    """Query routers: small's prefill (reused if small answers) gives the prompt feature."""
    level = level_for(ARGMAX, temperature)
    _, h = yield from catch_up(run, "small", run.tokens, run.n_prompt, True, level=level)
    view = QueryView(torch.tensor(run.tokens), h.mean(dim=0), gen)
    return "large" if router.route_query(view) else "small"


def _check(d: Decision, k: int) -> None:
    if not 0 <= d.keep <= k or (d.keep < k and not d.defer):
        raise RuntimeError(f"router decision {d} is invalid for a draft of {k} tokens")


def decode_steps(
    models: dict[str, Backend],
    router: Router,
    prompt_ids: list[int],
    cfg: DecodeConfig,
    decode: Callable[[list[int]], str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    answers: dict | None = None,
) -> DecodeSteps:
    """The decode loop of one generation (see `generate`), as a generator of model calls.

    `answers` (query routers only, see `Job`): the chosen route's answer, when given, is that
    Generation behind this generation's own routing pass (`reused_answer`), not decoded again."""
    run = GenerationState(models, list(prompt_ids), len(prompt_ids), clock)
    gen = torch.Generator().manual_seed(cfg.seed)
    for m in models.values():
        m.reset()
    router.reset()
    start, ttft, query_route, stop_reason = clock(), math.nan, "", "max_tokens"
    # 1. query routers decide once, then the answer is small-only or large-only
    if router.needs().query:
        query_route = yield from route_query(run, router, gen, cfg.temperature)
        if answers and query_route in answers:
            return reused_answer(run, answers[query_route], query_route, clock() - start)
        router = SmallOnly() if query_route == "small" else LargeOnly()
    while len(run.provenance) < cfg.max_new_tokens:
        t0, n_before = clock(), len(run.forwards)
        needs, n_old = router.needs(), len(run.tokens)
        k = min(needs.draft_len, cfg.max_new_tokens - len(run.provenance))
        level = level_for(needs.small_logits, cfg.temperature)  # what of q is read
        # 2. draft: small proposes k tokens
        if k > 0:
            d_ids, q, h = yield from draft(run, k, cfg, gen, needs.small_hidden, level)
            k = len(d_ids)
        # 3. score: the reward model rates each drafted token
        rew = (yield from score(run, d_ids, level)) if k and needs.reward else None
        # 4. verify: large reads the draft in one pass when the router needs p
        p = (yield from verify(run, d_ids)) if k and needs.large_logits else None
        # 5. decide
        if k == 0:
            d = Decision(keep=0, defer=True)
        else:
            rows, summary = (q, None) if level == FULL else (None, q)
            n = len(run.provenance)
            view = StepView(n, d_ids, rows, h, p, rew, cfg.temperature, cfg.top_p, gen, summary)
            d = router.decide(view)
            _check(d, k)
        # 6. emit: the kept draft, then large's token when deferring (within the token budget)
        emitted = d_ids[: d.keep].tolist() if k else []
        run.tokens += emitted
        run.provenance += [0] * len(emitted)
        large_tok = d.defer and len(run.provenance) < cfg.max_new_tokens
        if large_tok:
            if d.large_token is None:
                if p is not None:
                    row = p[d.keep]
                else:
                    level = level_for(ARGMAX, cfg.temperature)  # large's token only
                    out, _ = yield from catch_up(run, "large", run.tokens, 1, level=level)
                    row = out[0]
                tok = next_token(row, cfg.temperature, cfg.top_p, gen)
            else:
                tok = d.large_token
            run.tokens.append(tok)
            run.provenance.append(1)
        # 7. rollback: caches that read rejected draft tokens forget them
        rollback(run, n_old + d.keep)
        called = any(f.model == "large" for f in run.forwards[n_before:])
        run.steps.append(StepRecord(k, d.keep, int(large_tok), called, clock() - t0))
        if run.provenance and math.isnan(ttft):
            ttft = clock() - start
        # 8. stop on EOS or a stop string
        stop_reason = _stopped(run, n_old, cfg, decode)
        if stop_reason:
            break
    ids = run.tokens[run.n_prompt :]
    if ids and ids[-1] in cfg.eos_ids:
        ids, run.provenance = ids[:-1], run.provenance[: len(ids) - 1]
    text = cut_at_stop(decode(ids), cfg.stop) if decode else ""
    return Generation(
        prompt_ids=tuple(prompt_ids),
        token_ids=tuple(ids),
        text=text,
        provenance=tuple(run.provenance),
        stop_reason=stop_reason or "max_tokens",
        steps=tuple(run.steps),
        forwards=tuple(run.forwards),
        seconds=clock() - start,
        ttft=ttft,
        query_route=query_route,
    )


def _stopped(run: GenerationState, n_old: int, cfg: DecodeConfig, decode) -> str:
    """Trim the tokens after an EOS emitted this step; report why decoding should stop."""
    new = run.tokens[n_old:]
    for i, t in enumerate(new):
        if t in cfg.eos_ids:
            del run.tokens[n_old + i + 1 :]
            del run.provenance[len(run.tokens) - run.n_prompt :]
            return "eos"
    if cfg.stop and decode is not None:
        text = decode(run.tokens[run.n_prompt :])
        if any(s in text for s in cfg.stop):
            return "stop_string"
    return ""


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """`text` up to the first of the `stop` strings it holds (all of it if none)."""
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text
