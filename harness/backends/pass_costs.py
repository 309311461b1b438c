"""Pass costs: what one forward pass of n new tokens on one sequence costs on this machine.

What a speculative step costs here (k one-token drafts, one verify pass of k + 1 tokens) and
small's catch-up, measured once per machine, models and threads and cached when the machine was
quiet (`harness.backends.contention`).
"""

from __future__ import annotations

import json
import sys
import time

from harness.backends.contention import cache_path, measured_quietly
from harness.backends.machine import cpu_brand

CONTEXT = 32  # tokens of context each timed pass runs on (cropped back to after each pass)
PASS_SIZES = (1, 2, 4, 8, 16, 33)  # tokens fed in one pass of one sequence (`pass_costs`)


def pass_costs(engine, sizes=PASS_SIZES, rounds: int = 5) -> dict[str, dict[int, float]]:
    """{"small" | "large": {n: seconds of one pass of n new tokens on one sequence}}: what a
    speculative step costs on this machine (k one-token drafts, one verify pass of k + 1 tokens)
    and small's catch-up. On a context of CONTEXT tokens, cropped back after each pass: every
    size twice to warm up (weights paged in), then `rounds` rounds over all sizes; the median per
    size, made non-decreasing in n (a pass of fewer tokens never costs more). Cached per machine,
    models and threads (cache_dir()/passes/), and only when measured on a quiet machine
    (`measured_quietly`); `pass_cost_record` returns the record with its provenance."""
    record = pass_cost_record(engine, sizes, rounds)
    return {r: {int(n): float(s) for n, s in t.items()} for r, t in record["seconds"].items()}


_PASS_RECORDS: dict[str, dict] = {}  # cache path -> record measured in this process


def pass_cost_record(engine, sizes=PASS_SIZES, rounds: int = 5) -> dict:
    """`pass_costs`' record: {"seconds", "threads", "cpu", "measured", "others_cores"}."""
    roles = ["small", "large"]
    threads = max(getattr(engine.backends[r], "threads", 1) for r in roles)
    path = cache_path("passes", engine, roles, threads, sizes)
    if path.exists():
        return json.loads(path.read_text())
    if str(path) not in _PASS_RECORDS:  # measured once per process when it could not be cached
        print("measuring pass costs on this machine (once) ...", file=sys.stderr)

        def measure() -> dict:
            return {
                "seconds": {r: _time_passes(engine.backends[r], sizes, rounds) for r in roles},
                "threads": threads,
                "cpu": cpu_brand(),
                "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }

        _PASS_RECORDS[str(path)] = measured_quietly("pass costs", measure, path)
    return _PASS_RECORDS[str(path)]


def _time_passes(backend, sizes, rounds: int) -> dict[str, float]:
    import statistics

    prompt = [1 + i % 100 for i in range(CONTEXT)]
    backend.reset()
    backend.forward(prompt, 1)

    ids = {n: [7 + i % 50 for i in range(n)] for n in sizes}

    def one_pass(n: int) -> float:
        backend.sync()
        t0 = time.perf_counter()
        backend.forward(ids[n], 1)
        backend.sync()
        seconds = time.perf_counter() - t0
        backend.crop(CONTEXT)
        return seconds

    for _ in range(2):
        for n in sizes:
            one_pass(n)
    times = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            times[n].append(one_pass(n))
    backend.reset()
    out, floor = {}, float("inf")
    for n in sorted(sizes, reverse=True):
        floor = min(floor, statistics.median(times[n]))
        out[str(n)] = round(floor, 6)
    return {n: out[n] for n in sorted(out, key=int)}
