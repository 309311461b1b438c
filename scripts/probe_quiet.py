"""Measure the batch-size probe again on this machine, TRIES times, without touching its cache, and
print one JSON line per try with the CPU other processes used meanwhile (`others_cores`).

    python scripts/probe_quiet.py [--tries 3] [--threads 2] > docs/data/probe-MACHINE-DATE.jsonl

Run it with the chain stopped: it is for checking a cached probe that may have been measured on a
busy machine (docs/issue14-sweep.md: machine B's probe of 2026-11-24 18:50 was).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from harness.backends.batch_size import Contention, cpu_features, machine_id, probe
    from harness.backends.engine import engine_from_args
    from harness.cli.main import build_parser

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    run = ["run", "--task", "gsm8k", "--router", "large", "--backend", "llama.cpp", "--batch",
           "16", "--threads", str(args.threads), "--out", "unused"]  # fmt: skip
    engine = engine_from_args(build_parser(run).parse_args(run))
    for _ in range(args.tries):
        with Contention() as busy:
            times = probe(engine)
        steps = {r: {str(b): round(s, 6) for b, s in t.items()} for r, t in times.items()}
        print(json.dumps({"measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                          "machine": {"id": machine_id(), "cpu_features": cpu_features()},
                          "threads": args.threads, "others_cores": busy.others_cores,
                          "step_seconds": steps}), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
