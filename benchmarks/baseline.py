"""Print the id of the saved benchmark baseline made on this machine's CPU (nothing if none).

    python benchmarks/baseline.py          # e.g. "0003"
    python benchmarks/baseline.py --cpu    # this machine's CPU, as pytest-benchmark records it

Only baselines with the floor timing (`extra_info[FLOOR]`) are picked: `benchmarks/check.py`
compares each router's time over the floor's, not absolute times. Even those ratios are compared
only on the same CPU name: the suite's absolute timings differed 3-10x between the AMD EPYC and
the Intel Xeon VMs this project has run on, and the share of Python in a ratio differs with them.
`.ci/run` enforces the check against the baseline of this CPU, and only shows the timings where
there is none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cpuinfo  # py-cpuinfo, pytest-benchmark's own source of machine_info

ROOT = Path(__file__).parent / "baselines"
FLOOR = "floor_min_s"  # extra_info key: the floor's fastest round, timed between the benchmark's


def pick() -> str:
    """The newest baseline made on this CPU that has the floor timing, or ""."""
    brand = cpuinfo.get_cpu_info().get("brand_raw", "")
    for path in sorted(ROOT.glob("*/*.json"), key=lambda p: p.name, reverse=True):
        saved = json.loads(path.read_text())
        has_floor = all(FLOOR in b.get("extra_info", {}) for b in saved["benchmarks"])
        if has_floor and saved["machine_info"]["cpu"].get("brand_raw") == brand:
            return path.name.split("_")[0]
    return ""


def main(argv: list[str]) -> int:
    if argv == ["--cpu"]:
        print(cpuinfo.get_cpu_info().get("brand_raw", ""))
        return 0
    print(pick())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
