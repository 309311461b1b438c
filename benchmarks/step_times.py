"""Where a run's decode steps went: speculative steps (small drafted, large verified) against
steps large decoded alone, from the per-step records (`generation.steps`).

    python -m benchmarks.step_times results/edition2/mbpp/speculative__adaptive=true \\
        results/edition2/mbpp/speculative__default results/edition2/mbpp/large__default

Per run: the steps of each kind after the first (prefill) step, the tokens they emitted, and
the mean seconds a step took as its rows recorded it. In a batched run a step's seconds are
the batch step's wall time, shared by every row in it, so a large-alone step that ran beside
rows still speculating records the longer time: compare the large-alone mean with the
large-only row's on the same machine. Reads files only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def step_times(folder: str | Path) -> dict[str, dict[str, float]]:
    """{"speculative" | "large alone": {"steps", "tokens", "seconds"}} over a run's records."""
    from harness.core.run_folder import RunFolder

    out = {k: {"steps": 0, "tokens": 0, "seconds": 0.0} for k in ("speculative", "large alone")}
    for rec in RunFolder(folder).done().values():
        steps = (rec.get("generation") or {}).get("steps") or {}
        keys = ("drafted", "kept", "large_tokens", "seconds")
        rows = zip(*(steps.get(k, ()) for k in keys), strict=True)
        for i, (drafted, kept, large, seconds) in enumerate(rows):
            if i == 0:
                continue  # the prefill step: time to first token
            kind = out["speculative" if drafted else "large alone"]
            kind["steps"] += 1
            kind["tokens"] += (kept if drafted else 0) + large
            kind["seconds"] += seconds
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run folders (each with records.jsonl)")
    args = p.parse_args(argv)
    print("| run | kind | steps | tokens | tokens/step | mean s/step |")
    print("|---|---|---|---|---|---|")
    for run in args.runs:
        for kind, t in step_times(run).items():
            if t["steps"]:
                print(f"| {Path(run).name} | {kind} | {t['steps']} | {t['tokens']} | "
                      f"{t['tokens'] / t['steps']:.2f} | {t['seconds'] / t['steps']:.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
