"""The batch size: how many generations decode together (`--batch N | auto`).

`auto` is measured, not guessed: `probe` times one-token decode steps of B sequences at once for
each model the engine batches (llama.cpp, remote), B in `CANDIDATES`, and `best_batch` picks the
B with the highest throughput for a step of every such model (B / sum of their step times). The
answer is cached per machine, models, threads and backend (cache_dir()/batch/), so only a
machine's first run pays the probe (seconds: 8 steps per B per model). A pair that cannot batch
(transformers runs sequences one at a time) is B = 1.

    hybridbench run --task gsm8k --router small --batch auto ...   # manifest: batch, batch_probe

Both this probe and `pass_costs` are timings of the machine as it is while they run: another
process busy on the CPU (a test suite, a build) inflates them. Each records `others_cores`, the
CPU the rest of the machine used meanwhile (`Contention`); one taken with more than
`BUSY_CORES` busy elsewhere is retried, and if every try was contended it is used for this run
but not cached, with a warning, so that the next run measures again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

from harness.metrics.machines import BUSY_CORES  # noqa: F401  (re-exported for callers)

CANDIDATES = (1, 2, 4, 8, 16)
PROBE_STEPS = 8  # one-token decode steps timed per batch size
PROBE_PROMPT = 32  # tokens each probe sequence holds before the timed steps
PASS_SIZES = (1, 2, 4, 8, 16, 33)  # tokens fed in one pass of one sequence (`pass_costs`)


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


TRIES = 3  # measurements of a contended machine before one is used uncached


def _cpu_seconds_all() -> float | None:
    """CPU seconds every process on this machine has run so far (/proc/stat: user, nice,
    system, irq, softirq); None where there is no /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


class Contention:
    """`with Contention() as c: ...` then `c.others_cores`: the mean number of cores processes
    other than this one kept busy during the block (None where it cannot be read); or
    `c = Contention()` then `c.so_far()` at any time after."""

    others_cores: float | None = None

    def __init__(self) -> None:
        self._all, self._own, self._wall = (
            _cpu_seconds_all(), time.process_time(), time.perf_counter()
        )  # fmt: skip

    def __enter__(self) -> Contention:
        return self

    def __exit__(self, *exc) -> None:
        self.others_cores = self.so_far()

    def so_far(self) -> float | None:
        """The mean cores other processes kept busy from the start of the block until now."""
        now = _cpu_seconds_all()
        wall = time.perf_counter() - self._wall
        if now is None or self._all is None or wall <= 0:
            return None
        others = (now - self._all) - (time.process_time() - self._own)
        return round(max(others, 0.0) / wall, 2)


def measured_quietly(what: str, measure, path: Path) -> dict:
    """`measure()` (a record) with its `others_cores`, retried up to TRIES times while other
    processes kept more than BUSY_CORES busy; the least contended try is kept, and saved to the
    cache `path` only if it was quiet (else a warning: the next run measures again)."""
    limit = float(os.environ.get("HYBRIDBENCH_BUSY_CORES", BUSY_CORES))
    best = None
    for attempt in range(TRIES):
        with Contention() as c:
            record = measure()
        record["others_cores"] = c.others_cores
        if best is None or (c.others_cores or 0.0) < (best["others_cores"] or 0.0):
            best = record
        if (c.others_cores or 0.0) <= limit:
            return _save(path, best)
        print(f"{what}: other processes kept {c.others_cores} cores busy while measuring "
              f"(try {attempt + 1} of {TRIES})", file=sys.stderr)  # fmt: skip
    print(f"warning: {what} measured on a busy machine ({best['others_cores']} cores used "
          "elsewhere): used for this run, not cached", file=sys.stderr)  # fmt: skip
    return best


def _cache_path(kind: str, engine, roles: list[str], threads: int, sizes) -> Path:
    """The cache file of a measurement of `roles` on this machine, models and threads."""
    from harness.backends.models import cache_dir

    infos = {r: engine.backends[r].info for r in roles}
    key = json.dumps(
        [platform.processor() or platform.machine(), cpu_brand(), threads, list(sizes)]
        + [(r, i.source, i.sha256, i.backend) for r, i in sorted(infos.items())]
    )
    return cache_dir() / kind / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".json")


def _save(path: Path, record: dict) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return record


def auto(engine, threads: int, shape: dict | None = None) -> tuple[int, dict]:
    """(batch size, the probe's record) for this engine on this machine and the router's
    `shape` of a decode step (None: one one-token call of each model); cached."""
    roles = batched_roles(engine)
    if not roles:
        return 1, {"reason": "no model here decodes several sequences in one call"}
    shape = {r: tuple(v) for r, v in sorted((shape or {}).items()) if r in roles} or None
    sizes = list(CANDIDATES) + ([sorted(shape.items())] if shape else [])
    path = _cache_path("batch", engine, roles, threads, sizes)
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


def pass_costs(engine, sizes=PASS_SIZES, rounds: int = 5) -> dict[str, dict[int, float]]:
    """{"small" | "large": {n: seconds of one pass of n new tokens on one sequence}}: what a
    speculative step costs on this machine (k one-token drafts, one verify pass of k + 1 tokens)
    and small's catch-up. On a PROBE_PROMPT-token context, cropped back after each pass: every
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
    path = _cache_path("passes", engine, roles, threads, sizes)
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

    prompt = [1 + i % 100 for i in range(PROBE_PROMPT)]
    backend.reset()
    backend.forward(prompt, 1)

    ids = {n: [7 + i % 50 for i in range(n)] for n in sizes}

    def one_pass(n: int) -> float:
        backend.sync()
        t0 = time.perf_counter()
        backend.forward(ids[n], 1)
        backend.sync()
        seconds = time.perf_counter() - t0
        backend.crop(PROBE_PROMPT)
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


SIMD = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
        "amx_tile", "neon", "asimd", "sve")  # fmt: skip


def cpu_features() -> list[str]:
    """The SIMD extensions of `SIMD` the processor has (/proc/cpuinfo flags; [] elsewhere):
    two machines sold under one brand ("AMD EPYC") differed 1.5x in llama.cpp's speed, one with
    AVX-512 and one without."""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith(("flags", "Features")):
                have = set(line.split(":", 1)[1].split())
                return [f for f in SIMD if f in have]
    except OSError:
        pass
    return []


def machine_id() -> str:
    """A random id made once per cache folder (cache_dir()/machine-id), the folder that keeps
    this machine's batch probes and pass costs: sessions that share it ran on one machine, and
    a machine that came new (an empty cache) gets another, even under the same CPU brand."""
    import uuid

    from harness.backends.models import cache_dir

    path = cache_dir() / "machine-id"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"machine-id.{os.getpid()}")
        tmp.write_text(uuid.uuid4().hex[:12] + "\n")
        tmp.replace(path)
    return path.read_text().strip()


def cpu_brand() -> str:
    """The processor's model name (/proc/cpuinfo), else platform.processor()."""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
