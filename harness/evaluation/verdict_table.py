"""An experiment's paired verdicts as a markdown table (`hybridbench experiment verdicts`): each
run of a verdict step's routers against the nearest run of each router it is compared with,
read from the verdicts' JSON files (`hybridbench compare --json`), p Holm-adjusted over the
step's family of comparisons."""

from __future__ import annotations

import json
import math
from pathlib import Path

from harness.evaluation.experiment import Verdicts
from harness.evaluation.progress import pairs_in, task_runs
from harness.metrics import verdicts
from reports.text import COMPARISON_HEADER, MATCH, comparison_cells


def verdict_table(step: Verdicts) -> list[str]:
    """The step's matched pairs as markdown table lines: each run of `step.routers` (its
    realized share) against the nearest run of each router of `step.against`, with both runs'
    large-token share and quality on the examples both scored (a file written before compare
    recorded them: each run's own; shares further apart there than MATCH, though the whole
    runs' were within it, are marked), the paired difference (run minus other), its 95% interval, the test's p and its p
    Holm-adjusted over the table's family (every pair of the step compared), from the verdicts'
    JSON files; a pair with no run within MATCH, or not compared yet, says so. [] while the
    routers have no run."""
    df = task_runs(step.folder, step.published)
    pairs = pairs_in(step, df)
    if not pairs:
        return []
    df = df.set_index("run")
    found = {
        (r, o): _comparison(step.verdict(r, o))
        for r, _, o in pairs
        if o and step.verdict(r, o).is_file()
    }
    found = dict(zip(found, verdicts.family(list(found.values())), strict=True))
    out = [
        "| run | share | against | its share | metric | run | against | "
        + " | ".join(COMPARISON_HEADER)
        + " |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    blank = " | " * (len(COMPARISON_HEADER) - 1)
    for run, router, other in pairs:
        if math.isnan(df.large_token_share[run]):
            out.append(f"| {run} | — | {router}: once the run has a share | | | | |{blank}|")
            continue
        share = f"{df.large_token_share[run]:.3f}"
        if not other:
            out.append(f"| {run} | {share} | {router}: no run within {MATCH:.2f} | | | | |{blank}|")
            continue
        if (run, other) not in found:
            out.append(f"| {run} | {share} | {other} | | not compared yet | | |{blank}|")
            continue
        v = json.loads(step.verdict(run, other).read_text(encoding="utf-8"))
        shares = (v.get(k, math.nan) for k in ("paired_share_new", "paired_share_old"))
        mine, its = (
            s if not math.isnan(s) else df.large_token_share[r]
            for s, r in zip(shares, (run, other), strict=True)
        )
        apart = " (not within 2 points here)" if abs(mine - its) > MATCH + 1e-9 else ""
        out.append(
            f"| {run} | {mine:.3f} | {other} | {its:.3f}{apart} | {v['metric']} "
            f"(n = {v['n_paired']}) | {v.get('paired_new', v['quality_new']):.3f} | "
            f"{v.get('paired_old', v['quality_old']):.3f} | "
            + " | ".join(comparison_cells(found[run, other]))
            + " |"
        )
    return out


def _comparison(path: Path) -> verdicts.Comparison:
    """The paired test a verdict's JSON holds (`hybridbench compare --json`); p NaN (no
    verdict) in a file written before compare recorded its test."""
    v = json.loads(path.read_text(encoding="utf-8"))
    diff = v.get("diff", v["quality_new"] - v["quality_old"])
    p = v.get("p", math.nan)
    pairs = v.get("discordant") or (None, None)
    return verdicts.Comparison(
        v["n_paired"], diff, *v["diff_ci"], v.get("test", ""), p, *pairs, p_adjusted=p
    )
