"""Print the id of the saved benchmark baseline made on this machine's CPU (nothing if none).

    python benchmarks/baseline.py          # e.g. "0002"
    python benchmarks/baseline.py --cpu    # this machine's CPU, as pytest-benchmark records it

Timings compare only on the same CPU: the suite's baselines differ 3-10x between the AMD EPYC
and the Intel Xeon VMs this project has run on, for the same code. `.ci/run` enforces the
regression check against the baseline of this CPU, and only shows the timings where there is none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cpuinfo  # py-cpuinfo, pytest-benchmark's own source of machine_info

ROOT = Path(__file__).parent / "baselines"


def main(argv: list[str]) -> int:
    brand = cpuinfo.get_cpu_info().get("brand_raw", "")
    if argv == ["--cpu"]:
        print(brand)
        return 0
    for path in sorted(ROOT.glob("*/*.json"), reverse=True):  # newest first
        saved = json.loads(path.read_text())["machine_info"]["cpu"].get("brand_raw")
        if saved == brand:
            print(path.name.split("_")[0])
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
