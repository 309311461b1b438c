"""The batch size: how many generations decode together (`--batch N | auto`).

`auto` is measured, not guessed: `probe` times one-token decode steps of B sequences at once for
each model the engine batches (llama.cpp, remote), B in `CANDIDATES`, and `best_batch` picks the
B with the highest throughput for a step of every such model (B / sum of their step times). The
answer is cached per machine, models, threads and backend (cache_dir()/batch/), so only a
machine's first run pays the probe (seconds: 8 steps per B per model). A pair that cannot batch
(transformers runs sequences one at a time) is B = 1.

    hybridbench run --task gsm8k --router small --batch auto ...   # manifest: batch, batch_probe

The probe is a timing of the machine as it is while it runs: it records `others_cores`, the CPU
the rest of the machine used meanwhile, and is cached only when that was quiet
(`harness.backends.contention.measured_quietly`).
"""

from __future__ import annotations

import json
import sys
import time

from harness.backends.contention import cache_path, measured_quietly
from harness.backends.machine import cpu_brand

CANDIDATES = (1, 2, 4, 8, 16)
PROBE_STEPS = 8  # one-token decode steps timed per batch size
PROBE_PROMPT = 32  # tokens each probe sequence holds before the timed steps


def parse(value: str) -> int | str:
    """`--batch` as given: a positive int or 'auto'."""
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        from harness.errors import UserError

        raise UserError(f"--batch must be a positive integer or 'auto', got {value!r}")
    return n


def batched_roles(engine) -> list[str]:
    """Roles whose backend runs several sequences in one call."""
    return [
        r for r, b in engine.backends.items() if hasattr(getattr(b, "owner", b), "forward_batch")
    ]


def probe(
    engine,
    candidates=CANDIDATES,
    steps: int = PROBE_STEPS,
    shape: dict | None = None,
    prompt: int = PROBE_PROMPT,
) -> dict[str, dict[int, float]]:
    """role -> {B: seconds per call of B sequences}, for the batched roles, each sequence
    holding `prompt` tokens. A call feeds each row one token, or the `tokens` of the role's
    (calls, tokens) in `shape` (a router's `batch_shape`: speculative decoding verifies k + 1
    tokens a row)."""
    out = {}
    for role in batched_roles(engine):
        owner = engine.backends[role]
        seqs = owner.sequences(max(candidates))
        n = (shape or {}).get(role, (1, 1))[1]
        out[role] = {}
        for b in candidates:
            for s in seqs:
                s.reset()
            owner.forward_batch(
                [(s, [1 + i % 100 for i in range(prompt)], 1, False) for s in seqs[:b]]
            )
            out[role][b] = time_calls(owner, seqs[:b], n, steps)
        for s in seqs:
            s.reset()
    return out


def time_calls(owner, seqs, n: int, steps: int) -> float:
    """Seconds per batched call that feeds each of `seqs` `n` tokens (n logit rows each): one
    warm-up call, then the mean of `steps` timed calls."""
    owner.forward_batch([(s, [7] * n, n, False) for s in seqs])  # warm-up
    owner.sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        owner.forward_batch([(s, [7] * n, n, False) for s in seqs])
    owner.sync()
    return (time.perf_counter() - t0) / steps


def best_batch(times: dict[str, dict[int, float]], shape: dict | None = None) -> int:
    """The B with the most steps per second when a step costs, for every model, its number of
    calls (1, or the `calls` of its (calls, tokens) in `shape`) of B rows each."""
    if not times:
        return 1
    sizes = set.intersection(*(set(t) for t in times.values()))
    calls = {r: (shape or {}).get(r, (1, 1))[0] for r in times}
    return max(sorted(sizes), key=lambda b: b / sum(calls[r] * t[b] for r, t in times.items()))


def auto(engine, threads: int, shape: dict | None = None) -> tuple[int, dict]:
    """(batch size, the probe's record) for this engine on this machine and the router's
    `shape` of a decode step (None: one one-token call of each model); cached."""
    roles = batched_roles(engine)
    if not roles:
        return 1, {"reason": "no model here decodes several sequences in one call"}
    shape = {r: tuple(v) for r, v in sorted((shape or {}).items()) if r in roles} or None
    sizes = list(CANDIDATES) + ([sorted(shape.items())] if shape else [])
    path = cache_path("batch", engine, roles, threads, sizes)
    if path.exists():
        record = json.loads(path.read_text())
        return int(record["batch"]), record
    print("measuring the fastest batch size on this machine (once) ...", file=sys.stderr)

    def measure() -> dict:
        times = probe(engine, shape=shape)
        return {
            "batch": best_batch(times, shape),
            **({"shape": {r: list(v) for r, v in shape.items()}} if shape else {}),
            "step_seconds": {
                r: {str(b): round(s, 6) for b, s in t.items()} for r, t in times.items()
            },
            "threads": threads,
            "cpu": cpu_brand(),
            "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    record = measured_quietly("the batch-size probe", measure, path)
    print(f"batch size {record['batch']} (probe: {path})", file=sys.stderr)
    return record["batch"], record
