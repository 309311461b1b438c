"""Which machine this is: its processor's brand and SIMD extensions, and the id of its cache.

Recorded with every timed run (`machine` in a run's sessions) so that timings are compared only
between runs of one machine.
"""

from __future__ import annotations

import os
import platform

SIMD = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "neon",
    "asimd",
    "sve",
)


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
