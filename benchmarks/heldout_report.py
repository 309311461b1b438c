"""A trained token router's held-out evidence as markdown, from what `hybridbench train-learned`
and `hybridbench train-r2r` saved in each training folder (metrics.json, overhead.json) and what
`hybridbench r2r-labels` committed (rollouts.jsonl): no model is loaded.

    python -m benchmarks.heldout_report results/learned --md experiments/learned-router-heldout.md
    python -m benchmarks.heldout_report results/r2r --md experiments/r2r-heldout.md

Per training folder (`results/learned/TASK`, its ablations `TASK-dist`, `TASK-hidden-token`,
CITER's reference labels `TASK-ref`; `results/r2r/TASK`, its ablations `TASK-every`,
`TASK-learned`): the held-out AUC of the router, entropy and confidence on the same held-out train
examples with their 95% example-bootstrap intervals and the paired differences; the share of
large-needed tokens (for critical labels: the critical divergences) each catches when it defers
10/20/35% of the tokens; where the router and entropy (confidence) disagree at each share: the
tokens only one of them defers and how often each set is one the label marks large-needed (for
the oracle's labels: large's greedy token differs from small's); and the per-token overhead.
Where they are there: a network trained on every divergence scored against the critical labels of
the same held-out examples (`on_critical`), the critical-divergence labels of each task
(`labels-TASK/rollouts.jsonl`) and what a critical-only oracle would defer on the held-out
examples.
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


def _router(m: dict) -> str:
    """The trained network's key in a metrics.json (learned, r2r): its first scorer."""
    return next(iter(m["auc"]))


INPUTS = {"r2r": ["top100", "hidden", "token"]}  # a network whose inputs are fixed


def _inputs(m: dict) -> str:
    return ",".join(m.get("inputs") or INPUTS.get(_router(m), ["?"]))


AUC_HEAD = [
    "| training | target | inputs | examples | tokens | large-needed | router | entropy "
    "| confidence | router - entropy | router - confidence |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]
LABELS_HEAD = [
    "| {} | examples | tokens | divergences | rolled out | critical | critical share "
    "| critical tokens (est.) |",
    "|---|---|---|---|---|---|---|---|",
]


def report(root: Path) -> list[str]:
    """The markdown lines for every training folder under `root`."""
    folders = _folders(root)
    metrics = {f.name: json.loads((f / "metrics.json").read_text()) for f in folders}
    out = [
        "## Held-out AUC (same held-out train examples; 95% example-bootstrap intervals)",
        "",
        *AUC_HEAD,
    ]
    for name, m in metrics.items():
        out.append(_auc_row(name, m, m["target"]))
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
                f"| {name} | {share} | {r[_router(m)]:.3f} | {r['entropy']:.3f} "
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
    on_critical = {k: m["on_critical"] for k, m in metrics.items() if "on_critical" in m}
    if on_critical:
        out += [
            "",
            "## Trained on every divergence, scored on the critical labels",
            "",
            "The same held-out examples' rolled-out divergences only: label 0 = critical, 1 = "
            "neutral (tokens where small agrees with large are left out).",
            "",
            *AUC_HEAD,
        ]
        out += [_auc_row(name, m, "critical") for name, m in on_critical.items()]
    labels = sorted(p.parent for p in root.glob("labels-*/rollouts.jsonl"))
    if labels:
        out += _labels(labels, metrics)
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
            o, key = json.loads(path.read_text()), _router(metrics[name])
            ms = o["ms_per_token"]
            out.append(
                f"| {name} | {o['threads']} | {o['tokens']} x {o['rounds']} | {ms['small']:.1f} "
                f"| {ms['entropy']:.1f} | {ms[key]:.1f} | {o['ratio_to_small'][key]:.3f} |"
            )
    return out


def _auc_row(name: str, m: dict, target: str) -> str:
    auc, diff, router = m["auc"], m["auc_difference"], _router(m)
    return (
        f"| {name} | {target} | {_inputs(m)} | {m['examples']} | {m['rows']} "
        f"| {m['large_needed'] / m['rows']:.3f} | {_ci(auc[router])} | {_ci(auc['entropy'])} "
        f"| {_ci(auc['confidence'])} | {_ci(diff[f'{router}-entropy'], True)} "
        f"| {_ci(diff[f'{router}-confidence'], True)} |"
    )


def rollout_stats(path: Path) -> dict:
    """What a rollouts.jsonl (`hybridbench r2r-labels`) holds, as the labels' stats.json
    (harness.training.critical.stats) says it: its examples, the tokens of large's answers, the
    divergences found along them, those rolled out, those critical, their share of those rolled
    out and the share of the tokens a critical-only oracle would defer."""
    lines = path.read_text().splitlines()[1:]  # the first is the file's header
    rows = {r["id"]: r for r in map(json.loads, filter(None, lines))}.values()  # last per id
    out = {"examples": len(rows), "tokens": sum(len(r["answer"]) for r in rows)}
    out["divergences"] = sum(r["divergences"] for r in rows)
    out["rolled_out"] = sum(len(r["rolled"]) for r in rows)
    out["critical"] = sum(bool(x[3]) for r in rows for x in r["rolled"])
    share = out["critical"] / out["rolled_out"] if out["rolled_out"] else float("nan")
    out["critical_share"] = share
    out["critical_token_share"] = (
        out["divergences"] / out["tokens"] * share if out["tokens"] else float("nan")
    )
    return out


def _labels_row(name: str, s: dict, divergence_share: bool) -> str:
    """A table row of label stats (`rollout_stats`'s or stats.json's keys); the divergences'
    share of the tokens beside their count where `divergence_share`."""
    divergences = str(s["divergences"])
    if divergence_share:
        divergences += f" ({s['divergences'] / s['tokens']:.3f})"
    return (
        f"| {name} | {s['examples']} | {s['tokens']} | {divergences} | {s['rolled_out']} "
        f"| {s['critical']} | {s['critical_share']:.3f} | {s['critical_token_share']:.4f} |"
    )


def _labels(folders: list[Path], metrics: dict) -> list[str]:
    out = [
        "",
        "## The critical-divergence labels (train split)",
        "",
        "From each task's rollouts.jsonl: the divergences found along large's greedy answers as "
        "they were rolled out, those rolled out (a seeded cap an example) and the share of those "
        "whose continuation's scored outcome differs from large's own answer's (the verifier is "
        "the task's scorer). Critical tokens (est.): divergences / tokens x the critical share.",
        "",
        LABELS_HEAD[0].format("task"),
        LABELS_HEAD[1],
    ]
    for folder in folders:
        s = rollout_stats(folder / "rollouts.jsonl")
        out.append(_labels_row(folder.name.removeprefix("labels-"), s, divergence_share=True))
    held = {k: m["heldout_labels"] for k, m in metrics.items() if "heldout_labels" in m}
    if held:
        out += [
            "",
            "What a critical-only oracle would defer on each training's held-out examples (its "
            "labels' file as the network was trained on it):",
            "",
            LABELS_HEAD[0].format("training"),
            LABELS_HEAD[1],
        ]
        out += [_labels_row(name, h, divergence_share=False) for name, h in held.items()]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "root", type=Path, help="the folder of the training folders (results/learned, results/r2r)"
    )
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
