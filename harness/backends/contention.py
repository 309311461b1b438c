"""Whether the machine was quiet while it was timed, and measurements kept only when it was.

Timings of the machine (the batch-size probe, pass costs) are timings of the machine as it is
while they run: another process busy on the CPU (a test suite, a build) inflates them.
`Contention` measures the CPU the rest of the machine used meanwhile (`others_cores`);
`measured_quietly` retries a measurement taken with more than `BUSY_CORES` busy elsewhere, and if
every try was contended uses it for this run but does not cache it, with a warning, so that the
next run measures again. `cache_path` names a measurement's cache file per machine, models and
threads (cache_dir()/<kind>/).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

from harness.backends.machine import cpu_brand
from harness.metrics.machines import BUSY_CORES

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
        self._all = _cpu_seconds_all()  # CPU seconds of every process
        self._own = time.process_time()  # this process's
        self._wall = time.perf_counter()

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
            return save(path, best)
        print(
            f"{what}: other processes kept {c.others_cores} cores busy while measuring "
            f"(try {attempt + 1} of {TRIES})",
            file=sys.stderr,
        )
    print(
        f"warning: {what} measured on a busy machine ({best['others_cores']} cores used "
        "elsewhere): used for this run, not cached",
        file=sys.stderr,
    )
    return best


def cache_path(kind: str, engine, roles: list[str], threads: int, sizes) -> Path:
    """The cache file of a measurement of `roles` on this machine, models and threads."""
    from harness.backends.models import cache_dir

    infos = {r: engine.backends[r].info for r in roles}
    key = json.dumps(
        [platform.processor() or platform.machine(), cpu_brand(), threads, list(sizes)]
        + [(r, i.source, i.sha256, i.backend) for r, i in sorted(infos.items())]
    )
    return cache_dir() / kind / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".json")


def save(path: Path, record: dict) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return record
