"""The scheduler: the drivers that run the decoding loop's model calls.

The loop (`harness.core.loop.decode_steps`) yields each model call a generation needs (a
`Call`). Two drivers run it:

    generate(models, router, ids, cfg)       one generation; each call runs as it comes
    generate_many(slots, router, jobs)       up to len(slots) generations in flight; the calls
                                             they wait on are grouped by model and each group
                                             runs as ONE batched call (`forward_batch`)

With one model on a CUDA device and the other on the CPU (the seeds' setting), a round runs
both: the device model's batched pass is issued (`launch_batch`), the CPU model's runs while the
device works, then the device's outputs are read, so neither sits idle while the other works.

B = 1 is `generate` exactly: a generation's tokens depend only on the outputs it is sent.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass

from harness.core.backend import Backend
from harness.core.loop import Call, DecodeConfig, decode_steps
from harness.core.records import Generation
from harness.core.router import Router
from harness.core.stats import FULL


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
    return run_calls(decode_steps(models, router, prompt_ids, cfg, decode, clock), clock)


def run_calls(steps: Generator, clock: Callable[[], float] = time.perf_counter):
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
    one batched call (`backend.forward_batch` where the backend batches, else one at a time),
    beside a model on the other side of a CPU/device split, if any waits (`_partner`).
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
        partner = _partner(active, owner)
        if partner is None:
            group = _group(active, owner)
            results = _run_group(owner, [active[i][2] for i in group], clock)
            done = list(zip(group, results, strict=True))
        else:  # the device's pass runs while the CPU's does
            device, cpu = (owner, partner) if _launches(owner) else (partner, owner)
            on_device, on_cpu = _group(active, device), _group(active, cpu)
            collect = _launched(device, [active[i][2] for i in on_device], clock)
            done = list(
                zip(on_cpu, _run_group(cpu, [active[i][2] for i in on_cpu], clock), strict=True)
            )
            done += zip(on_device, collect(), strict=True)
        for i, result in done:
            yield from _advance(active, free, i, result)


def _group(active: dict, owner) -> list[int]:
    """The slots whose generations wait on `owner`, in slot order."""
    return [i for i in sorted(active) if _owner(active[i][2].backend) is owner]


def _args(owner, calls: list[Call]) -> list[tuple]:
    levels = getattr(owner, "summarizes", False)  # else rows, summarized by the loop
    return [(c.backend, c.ids, c.n_rows, c.hidden) + (c.level,) * levels for c in calls]


def _run_group(owner, calls: list[Call], clock) -> list:
    """The calls waiting on one model: one batched call where the backend batches."""
    if len(calls) > 1 and hasattr(owner, "forward_batch"):
        args = _args(owner, calls)
        return _timed(calls, lambda: owner.forward_batch(args), clock)
    return [_timed([c], lambda c=c: [_forward(c)], clock)[0] for c in calls]


def _launches(owner) -> bool:
    """Whether `owner` issues a pass that its device runs while the host goes on
    (`launch_batch`: transformers on CUDA)."""
    return bool(getattr(owner, "launches", False))


def _partner(active: dict, owner):
    """The model whose waiting calls run at the same time as `owner`'s this round: one on the
    CPU when `owner` launches on a device, or the device one when `owner` runs on the CPU
    (the most waited on; ties: the lowest slot's); None when there is none."""
    counts: dict[int, list] = {}
    for i in sorted(active):
        o = _owner(active[i][2].backend)
        if (
            o is not owner
            and _launches(o) != _launches(owner)
            and _on_cpu(o if _launches(owner) else owner)
        ):
            counts.setdefault(id(o), [0, o])[0] += 1
    return max(counts.values(), key=lambda c: c[0])[1] if counts else None


def _on_cpu(backend) -> bool:
    info = getattr(backend, "info", None)
    return not str(getattr(info, "device", "cpu")).startswith("cuda")


def _launched(owner, calls: list[Call], clock) -> Callable[[], list]:
    """Issue the calls waiting on `owner` as one pass now (`launch_batch`); the returned
    function waits for it and gives each call's (outputs, hidden, seconds from issue to
    outputs), or the exception for every call."""
    for c in calls:
        c.backend.sync()
    t0 = clock()
    try:
        read = owner.launch_batch(_args(owner, calls))
    except Exception as e:  # noqa: BLE001 - handed to the generations, see _advance
        failed = [e] * len(calls)
        return lambda: failed

    def collect() -> list:
        try:
            outs = read()
            for c in calls:
                c.backend.sync()
        except Exception as e:  # noqa: BLE001
            return [e] * len(calls)
        seconds = clock() - t0
        return [(out, h, seconds) for out, h in outs]

    return collect


def _forward(call: Call):
    """One call; a backend that `summarizes` is asked for the call's level (else full rows)."""
    if call.level != FULL and getattr(call.backend, "summarizes", False):
        return call.backend.forward(call.ids, call.n_rows, call.hidden, level=call.level)
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
