"""What each trained router cost: one row per training output folder and per run whose answers a
training command read, with wall time, examples and tokens generated.

    hybridbench training-cost runs/trained          # a Markdown table

A training command's folder keeps `cost.jsonl` (one line per invocation, resumed ones included;
`harness.training.common.total_cost`): wall hours, and CPU hours of all the process's threads
(~threads x wall when it computes; not counting time it was stopped; "k of n invocations" when
older lines lack it); examples come from what the folder holds: reward data's manifest
(prompts), a reward head's metrics.json (prompts and chunk pairs), a router checkpoint's
provenance (train and calib ids). A `hybridbench run` folder (e.g. small's answers on train, the
query router's labels) has no cost log: its summary gives examples, tokens and examples/hour.
Reads files only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from harness.core.run_folder import COST_LOG, finished_runs
from harness.files import load_torch_file
from harness.training.common import total_cost
from harness.training.reward_data import DATA_MANIFEST

HEADER = (
    "folder",
    "command",
    "examples",
    "invocations",
    "wall hours",
    "CPU hours",
    "tokens generated",
)

CHECKPOINTS = ("reward.pt", "citer.pt", "query.pt", "learned.pt", "r2r.pt")


def examples(folder: Path) -> str:
    """What the folder's command trained or generated on, in words."""
    if (folder / "metrics.json").is_file():
        m = json.loads((folder / "metrics.json").read_text())
        if "n_pairs" in m:
            p = m["n_pairs"]
            return f"{m['n_prompts']} prompts, {p['train']} + {p['heldout']} chunk pairs"
    if (folder / "stats.json").is_file() and (folder / "rollouts.jsonl").is_file():
        s = json.loads((folder / "stats.json").read_text())  # r2r-labels
        return f"{s['examples']} train examples, {s['rolled_out']} divergences rolled out"
    if (folder / DATA_MANIFEST).is_file() and any(
        (folder / name).is_file() for name in ("pairs.jsonl", "pairs.jsonl.gz")
    ):
        m = json.loads((folder / DATA_MANIFEST).read_text())
        return f"{m['prompts']} prompts ({', '.join(m['tasks'])})"
    for name in CHECKPOINTS:
        if (folder / name).is_file():
            ck = load_torch_file(folder / name, "router checkpoint", "hybridbench train-*")
            if "train_ids" in ck:
                return f"{len(ck['train_ids'])} train + {len(ck.get('calib_ids', []))} calib"
    return "—"


def rows(root: Path) -> list[tuple[str, ...]]:
    """One table row per training folder (its cost.jsonl) and per run folder below `root`."""
    out = []
    for cost in sorted(root.rglob(COST_LOG)):
        folder = cost.parent
        commands = sorted({json.loads(x)["argv"][0] for x in cost.read_text().splitlines() if x})
        c = total_cost(folder)
        cpu = f"{c['cpu_s'] / 3600:.2f}" if c["invocations"] > c["without_cpu"] else "—"
        if c["without_cpu"] and cpu != "—":
            cpu += f" ({c['invocations'] - c['without_cpu']} of {c['invocations']} invocations)"
        out.append(
            (
                str(folder.relative_to(root)) or ".",
                ", ".join(commands),
                examples(folder),
                str(c["invocations"]),
                f"{c['wall_s'] / 3600:.2f}",
                cpu,
                f"{c['tokens_generated']:,}",
            )
        )
    for run in finished_runs(root):
        s = run.summary()
        n, per_hour = s.get("n") or 0, s.get("examples_per_hour") or math.nan
        tokens = round((s.get("tokens_per_example") or 0) * n)
        out.append(
            (
                str(run.path.relative_to(root)),
                f"run ({s.get('router')}, {s.get('split')})",
                f"{n} {s.get('task')} examples",
                "—",
                f"{n / per_hour:.2f}" if per_hour == per_hour else "—",
                "—",
                f"{tokens:,}",
            )
        )
    return out


def markdown(root: Path) -> str:
    """The table of `rows(root)`."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(root)]
    return "\n".join(lines)
