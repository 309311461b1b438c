"""The decoding core: one loop for every router (small-only, large-only, per-token, speculative).

Every model keeps a KV cache for the whole generation. Each model's cache holds a prefix of the
token sequence; when a model is consulted it catches up on the tokens it has not seen in ONE
batched forward pass (`catch_up`), and a rejected draft is undone by cropping caches (`rollback`).
A router never calls a model: it says what it needs (`routers.base.Needs`) and decides.

The loop (`decode_steps`) is the logic of ONE generation and never runs a model itself: it yields
each model call it needs (a `Call`) and is sent back the outputs. Two drivers run it:

    generate(models, router, ids, cfg)       one generation; each call runs as it comes
    generate_many(slots, jobs)               up to len(slots) generations in flight; the calls
                                             they wait on are grouped by model and each group
                                             runs as ONE batched call (llama.cpp: one
                                             llama_decode over several sequence ids)

A generation's tokens depend only on the outputs it is sent, so batching changes what it emits
only where a backend's batched kernels change logits (llama.cpp: float rounding, which can flip
a near-tie). B = 1 is `generate` exactly.

Run it:  hybridbench generate --router oracle --prompt "What is 7*6?"
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field, replace

import torch

from harness.backends import Backend
from harness.records import ForwardRecord, Generation, StepRecord
from harness.sampling import sample
from routers.base import Decision, QueryView, Router, StepView
from routers.baselines import LargeOnly, SmallOnly


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
    """One model call a generation waits on: `backend.forward(ids, n_rows, hidden)`."""

    backend: Backend
    ids: list[int]
    n_rows: int
    hidden: bool


# What a decode loop is: it yields Calls, is sent (outputs, hidden, seconds), returns a Generation.
Steps = Generator[Call, tuple, "Generation"]


@dataclass
class _Run:
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
    run: _Run, role: str, seq: list[int], n_rows: int, hidden: bool = False, phase: str = ""
):
    """One forward pass of `role` over the tokens of `seq` it has not cached yet.

    Returns its outputs at the last `n_rows` positions of `seq` (and the hidden states there).
    When the cache already holds more than `len(seq) - n_rows` tokens it is cropped first, so
    the pass always re-reads at least the rows asked for, unless only the last row is asked for
    and the model's previous pass ended exactly there (e.g. small's first token after a query
    router's prefill): then that pass's last row is returned and no pass runs.
    """
    m = run.models[role]
    memo = run.last.get(role)
    fresh = memo and memo[0] == m.length == len(seq) and (memo[2] is not None or not hidden)
    if n_rows == 1 and fresh:
        return memo[1][None], (memo[2][None] if hidden else None)
    m.crop(min(m.length, len(seq) - n_rows))
    before, new = m.length, seq[m.length :]
    phase = "prefill" if before == 0 else phase or _PHASE[role]
    out, h, seconds = yield Call(m, new, n_rows, hidden)
    run.forwards.append(ForwardRecord(role, phase, len(new), before, seconds))
    run.last[role] = (m.length, out[-1], None if h is None else h[-1])
    return out, h


_PHASE = {"small": "draft", "large": "catch_up", "reward": "score", "router": "score"}


def draft(run: _Run, k: int, cfg: DecodeConfig, gen: torch.Generator, hidden: bool):
    """Small proposes up to k tokens; stops early at EOS. The last token is not fed yet."""
    toks, rows, hids = [], [], []
    for _ in range(k):
        logits, h = yield from catch_up(run, "small", run.tokens + toks, 1, hidden)
        toks.append(sample(logits[0], cfg.temperature, cfg.top_p, gen))
        rows.append(logits[0])
        hids.append(h[0] if hidden else None)
        if toks[-1] in cfg.eos_ids:
            break
    return (
        torch.tensor(toks, dtype=torch.long),
        torch.stack(rows),
        torch.stack(hids) if hidden else None,
    )


def verify(run: _Run, draft_ids: torch.Tensor) -> torch.Tensor:
    """Large over the prefix it has not seen plus the whole draft, in one pass: k+1 rows of p."""
    seq = run.tokens + draft_ids.tolist()
    out, _ = yield from catch_up(run, "large", seq, len(draft_ids) + 1, phase="verify")
    return out


def score(run: _Run, draft_ids: torch.Tensor) -> torch.Tensor:
    """Reward of each drafted token, from the reward model's own incremental cache; or, for a
    reward head on small itself (`reads_small`), from small's pass over the draft, whose last
    row small's next draft reuses when the draft is kept (`catch_up`)."""
    seq, k = run.tokens + draft_ids.tolist(), len(draft_ids)
    rm = run.models["reward"]
    if getattr(rm, "reads_small", False):
        _, h = yield from catch_up(run, "small", seq, k, hidden=True, phase="score")
        return rm.score(h)
    out, _ = yield from catch_up(run, "reward", seq, k)
    return out[:, 0]


def rollback(run: _Run, n_valid: int) -> None:
    """Crop every cache that has read past the first `n_valid` tokens of the new sequence."""
    for m in run.models.values():
        m.crop(min(m.length, n_valid))


def route_query(run: _Run, router: Router, gen: torch.Generator) -> str:
    """Query routers: small's prefill (reused if small answers) gives the prompt feature."""
    _, h = yield from catch_up(run, "small", run.tokens, run.n_prompt, hidden=True)
    view = QueryView(torch.tensor(run.tokens), h.mean(dim=0), gen)
    return "large" if router.route_query(view) else "small"


def _check(d: Decision, k: int) -> None:
    if not 0 <= d.keep <= k or (d.keep < k and not d.defer):
        raise RuntimeError(f"router decision {d} is invalid for a draft of {k} tokens")


def generate(
    models: dict[str, Backend],
    router: Router,
    prompt_ids: list[int],
    cfg: DecodeConfig,
    decode: Callable[[list[int]], str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Generation:
    """Decode one prompt with `router` deciding, per step, which model's tokens are emitted.

    `models` maps roles ("small", "large", optionally "reward") to backends; `decode` turns
    token ids into text (needed for stop strings and the returned text).
    """
    return drive(decode_steps(models, router, prompt_ids, cfg, decode, clock), clock)


def drive(steps: Generator, clock: Callable[[], float] = time.perf_counter):
    """Run a generator of `Call`s (a decode loop, a `catch_up`) to its end, each call as it
    comes, timed device-synchronized; returns the generator's value."""
    result = None
    while True:
        try:
            call = steps.throw(result) if isinstance(result, Exception) else steps.send(result)
        except StopIteration as done:
            return done.value
        result = _timed([call], lambda c=call: [_forward(c)], clock)[0]


@dataclass(frozen=True, eq=False)
class Job:
    """One prompt for `generate_many`; `key` comes back with its result."""

    key: object
    prompt_ids: list[int]
    cfg: DecodeConfig
    router: Router | None = None  # this job's router; None: the one given to generate_many
    # a query router's answers decoded before, by route ("small"/"large": that model's greedy
    # Generation for this prompt and cfg): the route's answer is reused instead of decoded again
    answers: dict | None = None


def generate_many(
    slots: list[dict[str, Backend]],
    router: Router,
    jobs: Iterable[Job],
    decode: Callable[[list[int]], str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[tuple[Job, Generation | Exception]]:
    """Decode `jobs` with up to len(slots) generations in flight; yield (job, Generation) as each
    finishes (not in job order), or (job, exception) for one that failed.

    Each slot is one generation's models (role -> backend; `Engine.slots`), and each generation
    has its own copy of `router` (or of the job's own `router`). A freed slot takes the next job
    at once. Each round, the model with the most generations waiting on it runs their calls as
    one batched call (`backend.forward_batch` where the backend batches, else one at a time).
    """
    jobs, active = iter(jobs), {}  # slot index -> [job, steps, pending Call]
    free = list(range(len(slots)))[::-1]
    while True:
        while free:  # fill free slots
            job = next(jobs, None)
            if job is None:
                break
            i = free.pop()
            r = copy.deepcopy(job.router or router)
            steps = decode_steps(
                slots[i], r, job.prompt_ids, job.cfg, decode, clock, answers=job.answers
            )
            active[i] = [job, steps, None]
            yield from _advance(active, free, i, None)
        if not active:
            return
        owner = _busiest(active)
        group = [i for i in sorted(active) if _owner(active[i][2].backend) is owner]
        calls = [active[i][2] for i in group]
        if len(calls) > 1 and hasattr(owner, "forward_batch"):
            args = [(c.backend, c.ids, c.n_rows, c.hidden) for c in calls]
            results = _timed(calls, lambda o=owner, a=args: o.forward_batch(a), clock)
        else:
            results = [_timed([c], lambda c=c: [_forward(c)], clock)[0] for c in calls]
        for i, result in zip(group, results, strict=True):
            yield from _advance(active, free, i, result)


def _forward(call: Call):
    return call.backend.forward(call.ids, call.n_rows, call.hidden)


def _timed(calls: list[Call], run: Callable[[], list], clock) -> list:
    """(outputs, hidden, seconds) per call from `run`, device-synchronized; the exception for
    every call when it raises (the generations waiting on it see it raised where they called)."""
    for c in calls:
        c.backend.sync()
    t0 = clock()
    try:
        outs = run()
        for c in calls:
            c.backend.sync()
    except Exception as e:  # noqa: BLE001 - handed to the generations, see _advance
        return [e] * len(calls)
    seconds = clock() - t0
    return [(out, h, seconds) for out, h in outs]


def _owner(backend):
    """What batches this backend's calls: the model object its sequences share, or itself."""
    return getattr(backend, "owner", backend)


def _busiest(active: dict) -> object:
    """The model the most waiting generations need (ties: the lowest slot's)."""
    counts: dict[int, list] = {}
    for i in sorted(active):
        owner = _owner(active[i][2].backend)
        counts.setdefault(id(owner), [0, owner])[0] += 1
    return max(counts.values(), key=lambda c: c[0])[1]


def _advance(active: dict, free: list, i: int, result):
    """Send `result` (or raise it, an exception) in slot i's generation; park its next call, or
    yield its end."""
    job, steps, _ = active[i]
    try:
        active[i][2] = steps.throw(result) if isinstance(result, Exception) else steps.send(result)
        return
    except StopIteration as done:
        outcome = done.value
    except Exception as e:  # noqa: BLE001 - one failed generation must not stop the others
        outcome = e
    del active[i]
    free.append(i)
    yield job, outcome


def decode_steps(
    models: dict[str, Backend],
    router: Router,
    prompt_ids: list[int],
    cfg: DecodeConfig,
    decode: Callable[[list[int]], str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    answers: dict | None = None,
) -> Steps:
    """The decode loop of one generation (see `generate`), as a generator of model calls.

    `answers` (query routers only, see `Job`): the chosen route's answer, when given, is that
    Generation behind this generation's own routing pass (`reused_answer`), not decoded again."""
    run = _Run(models, list(prompt_ids), len(prompt_ids), clock)
    gen = torch.Generator().manual_seed(cfg.seed)
    for m in models.values():
        m.reset()
    router.reset()
    start, ttft, query_route, stop_reason = clock(), math.nan, "", "max_tokens"
    # 1. query routers decide once, then the answer is small-only or large-only
    if router.needs().query:
        query_route = yield from route_query(run, router, gen)
        if answers and query_route in answers:
            return reused_answer(run, answers[query_route], query_route, clock() - start)
        router = SmallOnly() if query_route == "small" else LargeOnly()
    while len(run.provenance) < cfg.max_new_tokens:
        t0, n_before = clock(), len(run.forwards)
        needs, n_old = router.needs(), len(run.tokens)
        k = min(needs.draft_len, cfg.max_new_tokens - len(run.provenance))
        # 2. draft: small proposes k tokens
        if k > 0:
            d_ids, q, h = yield from draft(run, k, cfg, gen, needs.small_hidden)
            k = len(d_ids)
        # 3. score: the reward model rates each drafted token
        rew = (yield from score(run, d_ids)) if k and needs.reward else None
        # 4. verify: large reads the draft in one pass when the router needs p
        p = (yield from verify(run, d_ids)) if k and needs.large_logits else None
        # 5. decide
        if k == 0:
            d = Decision(keep=0, defer=True)
        else:
            view = StepView(
                len(run.provenance), d_ids, q, h, p, rew, cfg.temperature, cfg.top_p, gen
            )
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
                    rows = p[d.keep]
                else:
                    rows = (yield from catch_up(run, "large", run.tokens, 1))[0][0]
                tok = sample(rows, cfg.temperature, cfg.top_p, gen)
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


def reused_answer(run: _Run, answer: Generation, route: str, routing_s: float) -> Generation:
    """What decoding the query route `route` after the routing pass in `run` gives, from that
    route's answer decoded on its own before (greedy: the same tokens). Small's route continues
    from the routing prefill (`catch_up`'s last-row reuse), so small's own prefill is replaced by
    the routing one; large's answer follows it. Seconds are the routing pass's plus the answer's
    (its own prefill's taken out on the small route)."""
    if len(answer.prompt_ids) != run.n_prompt:
        raise ValueError(
            f"the reused {route} answer read a prompt of {len(answer.prompt_ids)} tokens, "
            f"this one has {run.n_prompt}"
        )
    forwards = answer.forwards
    saved = 0.0
    if route == "small":
        if not forwards or forwards[0].phase != "prefill" or forwards[0].model != "small":
            raise ValueError("the reused small answer does not start with small's prefill")
        saved, forwards = forwards[0].seconds, forwards[1:]
    return replace(
        answer,
        prompt_ids=tuple(run.tokens[: run.n_prompt]),
        forwards=tuple(run.forwards) + tuple(forwards),
        seconds=routing_s + answer.seconds - saved,
        ttft=routing_s + answer.ttft - saved,
        query_route=route,
    )


def _stopped(run: _Run, n_old: int, cfg: DecodeConfig, decode) -> str:
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
