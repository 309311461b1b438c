"""What each trained router cost (issue 13): one row per training output folder and per run whose
answers a training command read, with wall time, examples and tokens generated.

    python scripts/training_cost.py results/train13          # a Markdown table

A training command's folder keeps `cost.jsonl` (one line per invocation, resumed ones included;
`harness.training.common.total_cost`): wall hours, and CPU hours of all the process's threads
(~threads x wall when it computes; not counting time it was stopped, e.g. by SIGSTOP;
logged since 2026-11-24, "k of n invocations" when older lines lack it); examples come from what the folder holds: reward data's
manifest (prompts), a reward head's metrics.json (prompts and chunk pairs), a router checkpoint's
provenance (train and calib ids). A `hybridbench run` folder (e.g. small's answers on train, the
query router's labels) has no cost log: its summary gives examples, tokens and examples/hour.
Reads files only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHECKPOINTS = ("reward.pt", "citer.pt", "query.pt")


def examples(folder: Path) -> str:
    """What the folder's command trained or generated on, in words."""
    if (folder / "metrics.json").is_file():
        m = json.loads((folder / "metrics.json").read_text())
        if "n_pairs" in m:
            p = m["n_pairs"]
            return f"{m['n_prompts']} prompts, {p['train']} + {p['heldout']} chunk pairs"
    if (folder / "manifest.json").is_file() and (folder / "pairs.jsonl").is_file():
        m = json.loads((folder / "manifest.json").read_text())
        return f"{m['prompts']} prompts ({', '.join(m['tasks'])})"
    for name in CHECKPOINTS:
        if (folder / name).is_file():
            import torch

            ck = torch.load(folder / name, map_location="cpu", weights_only=False)
            if "train_ids" in ck:
                return f"{len(ck['train_ids'])} train + {len(ck.get('calib_ids', []))} calib"
    return "—"


def rows(root: Path) -> list[tuple[str, ...]]:
    from harness.training.common import COST_LOG, total_cost

    out = []
    for cost in sorted(root.rglob(COST_LOG)):
        folder = cost.parent
        commands = sorted({json.loads(x)["argv"][0] for x in cost.read_text().splitlines() if x})
        c = total_cost(folder)
        cpu = f"{c['cpu_s'] / 3600:.2f}" if c["invocations"] > c["without_cpu"] else "—"
        if c["without_cpu"] and cpu != "—":
            cpu += f" ({c['invocations'] - c['without_cpu']} of {c['invocations']} invocations)"
        out.append((str(folder.relative_to(root)) or ".", ", ".join(commands), examples(folder),
                    str(c["invocations"]), f"{c['wall_s'] / 3600:.2f}", cpu,
                    f"{c['tokens_generated']:,}"))  # fmt: skip
    for summary in sorted(root.rglob("summary.json")):
        s = json.loads(summary.read_text())
        n, per_hour = s.get("n") or 0, s.get("examples_per_hour") or math.nan
        tokens = round((s.get("tokens_per_example") or 0) * n)
        out.append((str(summary.parent.relative_to(root)), f"run ({s.get('router')}, "
                    f"{s.get('split')})", f"{n} {s.get('task')} examples", "—",
                    f"{n / per_hour:.2f}" if per_hour == per_hour else "—", "—",
                    f"{tokens:,}"))  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="a folder holding training outputs (and runs)")
    args = ap.parse_args()
    if not args.root.is_dir():
        print(f"not a folder: {args.root}", file=sys.stderr)
        return 2
    header = ("folder", "command", "examples", "invocations", "wall hours", "CPU hours",
              "tokens generated")  # fmt: skip
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in rows(args.root):
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
