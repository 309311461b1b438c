"""One Markdown table row per run folder, from its summary.json and manifest.json (no model).

    python scripts/run_table.py reports/published/gsm8k/small__default reports/published/gsm8k/reward__*

Columns: run folder, router, the router's threshold (when it has one), examples, quality with
its 95% bootstrap CI, large-token share, large-call share, query (prompt) large share, and
throughput (emitted tokens / decode seconds). It is how the tables in docs/issue*-results.md
were made from the runs they name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _f(x, digits=3) -> str:
    return "—" if x is None or x != x else f"{x:.{digits}f}"


def row(run: Path) -> str:
    s = json.loads((run / "summary.json").read_text())
    m = json.loads((run / "manifest.json").read_text())
    threshold = m["router_args"].get("threshold")
    q = f"{_f(s['quality'], 2)} [{_f(s['quality_ci_low'], 2)}, {_f(s['quality_ci_high'], 2)}]"
    cells = [
        f"{run.parent.name}/{run.name}",
        s["router"],
        "—" if threshold is None else f"{threshold:.3g}",
        str(s["n"]),
        q,
        _f(s["large_token_share"]),
        _f(s["large_call_share"]),
        _f(s.get("query_large_share")),
        _f(s["tok_per_s"], 2),
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    runs = [Path(a) for a in (argv if argv is not None else sys.argv[1:])]
    if not runs:
        print(__doc__, file=sys.stderr)
        return 2
    head = ["run", "router", "threshold", "n", "quality [95% CI]", "large tokens",
            "large calls", "prompts to large", "tok/s"]  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for run in runs:
        if (run / "summary.json").exists():
            print(row(run))
        else:
            print(f"skipped {run}: no summary.json (not a finished run)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
