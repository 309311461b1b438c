"""The seed paper's Tables 1 and 2 in shape, from our runs: per task and reward setting, the
threshold (and target share), small / hybrid / large accuracy, the large-call share (the paper's
"activation ratio"), the large-token share and the measured throughput, absolute and against
large-only's on the same machine(s) (the leaderboard's ratio: tok/s alone compares machines).

    python -m benchmarks.paper_tables results/edition2/gsm8k results/edition2/mbpp [--router reward]

Each folder is a results folder (a sweep's): its `small` and `large` runs are the references,
every run of `--router` (default reward) is a row. Quality carries its 95% interval and n.
Reads files only.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def fmt(x, digits=3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def table(folder: str, router: str) -> str:
    import json

    from reports.leaderboard import _speed_cell
    from reports.leaderboard import quality_cell as quality
    from reports.load import add_speed, load_runs

    df = add_speed(load_runs(folder))
    refs = {r: df[df["router"] == r] for r in ("small", "large")}
    lines = [
        f"### {df['task'].iloc[0] if len(df) else folder} ({folder})",
        "",
        "| threshold | target share | n | small | hybrid | large | activation ratio "
        "(large-call share) | large-token share | tok/s (batch) | throughput / large-only |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    small = quality(refs["small"].iloc[0]) if len(refs["small"]) else "—"
    large = quality(refs["large"].iloc[0]) if len(refs["large"]) else "—"
    rows = df[df["router"] == router].copy()
    rows["_thr"] = [json.loads(a).get("threshold", math.nan) for a in rows["router_args"]]
    rows["_share"] = [json.loads(a).get("target_share") for a in rows["router_args"]]
    for _, r in rows.sort_values("_thr").iterrows():
        lines.append(
            f"| {fmt(r['_thr'])} | {fmt(r['_share'], 2)} | {int(r['n'])} | {small} | {quality(r)} "
            f"| {large} | {fmt(r['large_call_share'])} | {fmt(r['large_token_share'])} "
            f"| {fmt(r.get('throughput_tok_per_s', math.nan), 2)} ({fmt(r.get('batch'), 0)}) "
            f"| {_speed_cell(r)} |"
        )
    if rows.empty:
        lines.append(f"| no {router} runs | | | | | | | | | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="results folders, one per task")
    p.add_argument("--router", default="reward")
    args = p.parse_args(argv)
    print("\n\n".join(table(f, args.router) for f in args.folders))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
