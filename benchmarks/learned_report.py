"""The learned router's held-out evidence as markdown, from what `hybridbench train-learned` saved
in each training folder (metrics.json, overhead.json): no model is loaded.

    python -m benchmarks.learned_report results/learned --md experiments/learned-router-heldout.md

Per training folder (`results/learned/TASK`, its ablations `TASK-dist`, `TASK-hidden-token`,
CITER's reference labels `TASK-ref`): the held-out AUC of the router, entropy and confidence on
the same held-out train examples with their 95% example-bootstrap intervals and the paired
differences; the share of large-needed tokens each catches when it defers 10/20/35% of the
tokens; where the router and entropy (confidence) disagree at each share: the tokens only one of
them defers and how often each set is one the label marks large-needed (for the oracle's
labels: large's greedy token differs from small's); and the per-token overhead.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _ci(d: dict, signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    lo, hi = d["ci95"]
    return f"{f.format(d['value'])} [{f.format(lo)}, {f.format(hi)}]"


def _folders(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/metrics.json"))


def report(root: Path) -> list[str]:
    """The markdown lines for every training folder under `root`."""
    folders = _folders(root)
    metrics = {f.name: json.loads((f / "metrics.json").read_text()) for f in folders}
    out = [
        "## Held-out AUC (same held-out train examples; 95% example-bootstrap intervals)",
        "",
        "| training | target | inputs | examples | tokens | large-needed | router | entropy "
        "| confidence | router - entropy | router - confidence |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in metrics.items():
        auc, diff = m["auc"], m["auc_difference"]
        out.append(
            f"| {name} | {m['target']} | {','.join(m['inputs'])} | {m['examples']} | {m['rows']} "
            f"| {m['large_needed'] / m['rows']:.3f} | {_ci(auc['learned'])} | {_ci(auc['entropy'])} "
            f"| {_ci(auc['confidence'])} | {_ci(diff['learned-entropy'], True)} "
            f"| {_ci(diff['learned-confidence'], True)} |"
        )
    out += [
        "",
        "## Large-needed tokens caught when deferring a share of the held-out tokens",
        "",
        "| training | share | router | entropy | confidence |",
        "|---|---|---|---|---|",
    ]
    for name, m in metrics.items():
        for share, r in m["recall_at_share"].items():
            out.append(
                f"| {name} | {share} | {r['learned']:.3f} | {r['entropy']:.3f} "
                f"| {r['confidence']:.3f} |"
            )
    out += [
        "",
        "## Where the router and a threshold disagree",
        "",
        "At each share, the held-out tokens only the router defers and only the threshold defers "
        "(as many of each), and the share of each set the label marks large-needed.",
        "",
        "| training | share | threshold | tokens only one defers | large-needed: only router "
        "| large-needed: only threshold | deferred by both |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in metrics.items():
        for share, by in m["disagreements"].items():
            for other, d in by.items():
                n = d["only_first"]["rows"]
                mine, theirs = (
                    round(d[k]["large_needed"] * n) for k in ("only_first", "only_other")
                )
                out.append(
                    f"| {name} | {share} | {other} | {n} | {mine} ({mine / n:.3f}) "
                    f"| {theirs} ({theirs / n:.3f}) | {d['both']} |"
                )
    overheads = {f.name: f / "overhead.json" for f in folders if (f / "overhead.json").is_file()}
    if overheads:
        out += [
            "",
            "## Per-token overhead (unbatched, ms a token)",
            "",
            "| training | threads | tokens | small alone | entropy | router | router / small |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, path in overheads.items():
            o = json.loads(path.read_text())
            ms = o["ms_per_token"]
            out.append(
                f"| {name} | {o['threads']} | {o['tokens']} x {o['rounds']} | {ms['small']:.1f} "
                f"| {ms['entropy']:.1f} | {ms['learned']:.1f} | {o['ratio_to_small']['learned']:.3f} |"
            )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path, help="the folder of the training folders (results/learned)")
    p.add_argument("--md", type=Path, default=None, help="also write the markdown here")
    args = p.parse_args(argv)
    if not _folders(args.root):
        p.error(f"{args.root}: no training folder with a metrics.json")
    text = "\n".join(report(args.root)) + "\n"
    print(text, end="")
    if args.md:
        args.md.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
