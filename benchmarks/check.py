"""Fail on a router-overhead regression: each router's time over the floor's, against a baseline.

    python -m pytest benchmarks -m benchmark -q --benchmark-json=now.json
    python benchmarks/check.py now.json                   # baseline: benchmarks/baseline.py's pick
    python benchmarks/check.py now.json --baseline 0003 --max-slowdown 2

For every router, ratio = its fastest round / the fastest of the floor's rounds timed between its
own (`extra_info["floor_min_s"]`: the same tiny models decoding the same tokens with plain
transformers calls). The check fails (exit 1) when a router's ratio grew more than --max-slowdown
times over the baseline's.
Absolute timings do not compare across hosts: two CI hosts reporting the same CPU name ran the
same code 1.7x apart, uniformly over every router, which an absolute limit read as a regression.
A ratio moves only when the harness's own work per token grows against the models'.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import baseline  # benchmarks/baseline.py, beside this file: ROOT, FLOOR, pick()


def ratios(path: Path) -> dict[str, float]:
    """Benchmark name -> its fastest round over its floor's, from a pytest-benchmark JSON file."""
    out = {}
    for b in json.loads(path.read_text())["benchmarks"]:
        if baseline.FLOOR not in b.get("extra_info", {}):
            raise SystemExit(f"{path}: {b['name']} has no {baseline.FLOOR}: nothing to divide by")
        out[b["name"]] = b["stats"]["min"] / b["extra_info"][baseline.FLOOR]
    return out


def baseline_path(ident: str) -> Path:
    found = sorted(baseline.ROOT.glob(f"*/{ident}_*.json"))
    if not found:
        raise SystemExit(f"no saved baseline {ident!r} under {baseline.ROOT}")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("now", type=Path, help="pytest-benchmark JSON of this run (--benchmark-json)")
    ap.add_argument("--baseline", help="saved baseline id (default: benchmarks/baseline.py's)")
    ap.add_argument("--max-slowdown", type=float, default=2.0)
    args = ap.parse_args(argv)
    if args.baseline is None:
        args.baseline = baseline.pick()
        if not args.baseline:
            print("no saved baseline with a floor for this CPU: nothing to check against")
            return 0
    base_file = baseline_path(args.baseline)
    base, now = ratios(base_file), ratios(args.now)
    print(f"router time / floor time (fastest rounds), baseline {base_file.name} vs {args.now}")
    print(f"{'benchmark':40s} {'baseline':>9s} {'now':>9s} {'change':>7s}")
    bad = []
    for name in sorted(now):
        if name not in base:
            print(f"{name:40s} {'-':>9s} {now[name]:9.2f}    (new)")
            continue
        change = now[name] / base[name]
        flag = "  SLOWER" if change > args.max_slowdown else ""
        print(f"{name:40s} {base[name]:9.2f} {now[name]:9.2f} {change:6.2f}x{flag}")
        if flag:
            bad.append(name)
    if bad:
        print(f"regressed more than {args.max_slowdown}x against the floor: {', '.join(bad)}")
        return 1
    print(f"no router slowed more than {args.max_slowdown}x against the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
