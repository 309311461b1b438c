"""Where the real-model chain stands (scripts/heavy_chain.sh: issues 11, 13, 14): per run folder
its examples done of its target and, at the rate its sessions measured, the hours left; per
training folder its final files and the wall time it has cost so far. Reads files only.

    python scripts/chain_status.py                       # results/validity results/train13 results/edition2
    python scripts/chain_status.py results/edition2/gsm8k   # any folders holding run folders

A run's target is the --limit of its latest invocation, or its split's size where that is
smaller (--limit 1000 = all); a chain that grows a run in chunks (issue 11: 100, then 200) shows
the chunk under way. The plan itself is in the chain scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere without installing the package

DEFAULT = ("results/validity", "results/train13", "results/edition2")  # scripts/heavy_chain.sh
# training folders: the file that says a step is finished
FINAL = ("citer.pt", "query.pt", "reward.pt", "metrics.json", "pairs.jsonl")


@cache
def split_size(task: str, task_args: str, split: str, seed: int) -> int:
    from tasks import get_task

    return len(get_task(task, **json.loads(task_args)).split(split, seed=seed))


def run_status(folder: Path) -> str:
    """'done 200/200' or 'done 40/200, 160 to go, ~1.9 h at 85 examples/h'."""
    from harness.evaluation.runner import load_records
    from harness.metrics.quality import throughput

    m = json.loads((folder / "manifest.json").read_text())
    target = int(m.get("limit") or 10**9)
    if m.get("split") != "all" or target >= 10**9:
        size = split_size(m["task"], json.dumps(m.get("task_args") or {}, sort_keys=True),
                          m.get("split", "test"), int(m.get("split_seed", 0)))  # fmt: skip
        target = min(target, size)
    done = len(load_records(folder / "records.jsonl")) if (folder / "records.jsonl").exists() else 0
    text = f"done {done}/{target}"
    if done >= target:
        return f"done {done} (manifest --limit {target})" if done > target else text
    text += f", {target - done} to go"
    rate = throughput(m)["examples_per_hour"]  # the run's own rate, at its batch size
    if rate > 0:
        text += f", ~{(target - done) / rate:.1f} h at {rate:.0f} examples/h"
    return text


def training_status(folder: Path) -> str:
    """Its finished files and the wall hours of its cost.jsonl (every invocation)."""
    final = sorted(f for f in FINAL if (folder / f).exists()) or sorted(
        f.name for f in folder.glob("*.json") if f.name != "manifest.json"
    )  # a calibration folder: one file per router
    cost = folder / "cost.jsonl"
    hours = 0.0
    if cost.exists():
        for line in cost.read_text().splitlines():
            try:
                hours += float(json.loads(line).get("wall_s") or 0) / 3600
            except json.JSONDecodeError:
                continue
    if (folder / "pairs.jsonl").exists():
        pairs = sum(1 for _ in (folder / "pairs.jsonl").open())
        want = json.loads((folder / "manifest.json").read_text()).get("prompts", "?")
        final = [f"pairs.jsonl {pairs}/{want} prompts"]
    return f"{', '.join(final) or 'started, nothing final yet'}; {hours:.2f} h so far"


def lines(root: Path) -> list[str]:
    if root.is_file() or not root.exists():
        return [f"{root}: not started"] if not root.exists() else []
    out = []
    if root.name == "reference":  # benchmarks/reference_check.py: one JSON line per example
        for f in sorted(root.glob("*.jsonl")):
            out.append(f"{f}: {sum(1 for _ in f.open())} examples checked")
        return out
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        if (
            (d / "records.jsonl").exists()
            or (d / "manifest.json").exists()
            and "task" in (json.loads((d / "manifest.json").read_text()))
        ):
            out.append(f"{d}: {run_status(d)}")
        elif (d / "cost.jsonl").exists() or any((d / f).exists() for f in FINAL):
            out.append(f"{d}: {training_status(d)}")
        else:
            out += lines(d)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="*", default=list(DEFAULT))
    args = ap.parse_args(argv)
    for root in args.roots:
        print("\n".join(lines(Path(root))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
