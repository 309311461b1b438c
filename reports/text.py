"""The words of the leaderboard: number formats, router settings written for reading, and the
definitions every page ends with (each with an anchor the tables link to).

    >>> setting_text({"target_share": 0.2, "threshold": 0.350952}, {"target_share", "threshold"})
    'target 20% (threshold 0.351)'
    >>> constant_args({"reward": [{"draft_len": 1, "p": 0.1}, {"draft_len": 1, "p": 0.2}]})
    {'reward': {'draft_len': 1}}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from harness.metrics.verdicts import ALPHA, N_BOOT, SEED, Comparison
from reports.load import FILE_ARGS, decoded, flag

GOAL_SHARE = 0.25  # the quality goal: the most of the gap recovered at <= 25% large tokens
MATCH = 0.02  # large-token shares within 2 points count as matched


def nearest_share(pool, share: float) -> tuple[object, float]:
    """(index, gap): the row of `pool` (runs with a `large_token_share` column) whose share is
    nearest `share`, and how far it is; (None, inf) when `pool` has no rows. A row whose share
    is not known yet is never nearer than one whose share is; the pair is matched when the gap
    is at most MATCH."""
    if not len(pool):
        return None, math.inf
    gap = (pool["large_token_share"] - share).abs().fillna(math.inf)
    return gap.idxmin(), float(gap.min())


def diff_cell(c: Comparison) -> str:
    """A paired difference and its 95% interval, '+0.050 [+0.010, +0.090]'; '—' when n is 0."""
    return f"{c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}]" if c.n else "—"


def p_cell(p: float) -> str:
    """A p-value for reading: '0.078', '0.0042', '<0.0001'; '—' when there is no test."""
    if math.isnan(p):
        return "—"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


def comparison_cells(c: Comparison) -> tuple[str, str, str, str]:
    """(difference [95% CI], p, Holm-adjusted p, verdict): a comparison's columns, side by side
    (harness/metrics/verdicts.py holds the rule)."""
    return diff_cell(c), p_cell(c.p), p_cell(c.p_adjusted), c.verdict


# `comparison_cells`' columns
COMPARISON_HEADER = ("difference [95% CI]", "p", "p (Holm)", "verdict")


def verdict(c: Comparison) -> str:
    """A paired comparison's verdict (`verdicts.Comparison.verdict`): better, worse, no difference."""
    return c.verdict


def n_mark(n: int) -> str:
    """' (n = 200)' after a run's numbers where it scored fewer examples than the references
    (`reports.tables.own_references`); '' for 0."""
    return f" (n = {n})" if n else ""


def num(x, digits: int = 3) -> str:
    """`x` at fixed precision; '—' for a missing or undefined value."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "—"
    return "—" if math.isnan(x) else f"{x:.{digits}f}"


def pct(x) -> str:
    """A share as a percentage with one decimal: 0.795 -> '79.5%'; '—' when undefined."""
    return "—" if x is None or math.isnan(float(x)) else f"{100 * float(x):.1f}%"


def times(x) -> str:
    """A ratio to large-only's throughput: 0.64 -> '0.64×'; '—' when undefined."""
    cell = num(x, 2)
    return cell if cell == "—" else f"{cell}×"


def quality_cell(row) -> str:
    """A run's quality with its 95% interval: '0.250 [0.170, 0.330]'."""
    return f"{num(row['quality'])} [{num(row['quality_ci_low'])}, {num(row['quality_ci_high'])}]"


def is_modeled(r) -> bool:
    """Whether a run's clock is modeled (its answers were reused from other runs)."""
    return flag(r, "throughput_modeled")


def ratio_text(r) -> str:
    """A run's throughput / large-only's on the same machine(s) (`reports.load.add_speed`),
    marked where other processes were recorded busy meanwhile, and where some of its examples
    ran on a machine large-only never ran on (left out of the ratio)."""
    busy = " (contended)" if flag(r, "contended") else ""
    ratio, part, whole = (
        float(r.get(k, math.nan)) for k in ("vs_large", "vs_large_examples", "speed_examples")
    )
    partial = not math.isnan(ratio) and part < whole
    over = f" (over {part:.0f} of {whole:.0f} examples)" if partial else ""
    return num(ratio, 2) + busy + over


def ratio_cells(r) -> tuple[str, str]:
    """(measured, modeled) throughput / large-only of run `r`: one of them '—'; large-only's own
    run is 1.00 by definition."""
    if not decoded(r.get("n")):
        return "—", "—"
    if r["router"] == "large" and not is_modeled(r):
        return "1.00", "—"
    return ("—", ratio_text(r)) if is_modeled(r) else (ratio_text(r), "—")


def _value(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _percent(v) -> str:
    return f"{100 * float(v):g}%"


# How an argument reads, by name; any other argument reads "name = value".
READING = {
    "target_share": lambda v: f"target {_percent(v)}",
    "share": lambda v: f"target {_percent(v)}",  # a learned router's share of its calib tokens
    "p": lambda v: f"p = {_value(v)}",
    "k": lambda v: f"k = {_value(v)}",
    "adaptive": lambda v: "adaptive k" if v else "fixed k",
    "schedule": lambda v: f"{v} schedule",
}
TARGETS = ("target_share", "share")  # a threshold set by a target is written after it


def setting_text(args: Mapping, keys: Iterable[str] | None = None) -> str:
    """A run's router arguments written for reading, `keys` only (default: all but file
    arguments): 'target 20% (threshold 0.351)', 'p = 0.148', 'adaptive k, cost schedule';
    '—' when nothing is left."""
    keys = sorted(k for k in (args if keys is None else keys) if k in args and k not in FILE_ARGS)
    target = next((k for k in TARGETS if k in keys), None)
    parts = []
    for k in [target] if target else []:
        parts.append(READING[k](args[k]))
    rest = [k for k in keys if k not in TARGETS and k != "threshold"]
    rest.sort(key=lambda k: (k not in READING, k))  # the known knobs first
    parts += [READING[k](args[k]) if k in READING else f"{k} = {_value(args[k])}" for k in rest]
    if "threshold" in keys:
        t = f"threshold {_value(args['threshold'])}"
        if target:
            parts[0] += f" ({t})"
        else:
            parts.insert(0, t)
    return ", ".join(parts) or "—"


def constant_args(args_by_router: Mapping[str, list[Mapping]]) -> dict[str, dict]:
    """Per router run at two settings or more, the (non-file) arguments every one of its runs
    gives the same value: written once under a table instead of on every row."""
    out = {}
    for router, runs in args_by_router.items():
        if len(runs) < 2:
            continue
        same = {
            k: v
            for k, v in runs[0].items()
            if k not in FILE_ARGS and all(k in r and r[k] == v for r in runs[1:])
        }
        if same:
            out[router] = same
    return out


def constants_note(constants: Mapping[str, Mapping], rows: Iterable[tuple] = ()) -> str:
    """'Arguments every run of a router shares: reward draft_len = 1; speculative k = 4.', for
    the routers of a table's `rows` (each row's first cell starts with its router's name)."""
    shown = {str(row[0]).split(" ")[0] for row in rows}
    parts = [f"{r} {setting_text(a)}" for r, a in sorted(constants.items()) if r in shown]
    if not parts:
        return ""
    return "Arguments every run of a router shares: " + "; ".join(parts) + "."


# (anchor, term, text): each page's definitions, in this order; tables link their headers here.
DEFINITIONS = (
    (
        "def-quality",
        "quality",
        "the mean of the task's primary metric over the examples that did not fail; [95% CI] is "
        "a seeded percentile bootstrap of that mean.",
    ),
    (
        "def-token-share",
        "large token share",
        "tokens emitted by the large model / all emitted tokens (token-weighted).",
    ),
    (
        "def-call-share",
        "large call share",
        "decode steps in which the large model ran a forward pass / all decode steps.",
    ),
    (
        "def-gap",
        "gap recovered",
        "the share of the small-to-large quality gap a run closes, (q - q_small) / (q_large - "
        "q_small), as RouteLLM's PGR: 0% is small-only's quality, 100% large-only's.",
    ),
    (
        "def-goal",
        "quality goal",
        f"per router, its run with the highest quality among those at a large-token share <= "
        f"{GOAL_SHARE:g} (the oracle's at its own share: where it reaches large-only's quality), "
        "with the gap it recovers, its verdict against its control and its throughput.",
    ),
    (
        "def-paired",
        "verdict against the control",
        "each router's run against the run of its control (random; random_query for the query "
        "router; small-only and large-only count as either at shares 0 and 1, being the same "
        "policies) whose large-token share is nearest, paired by example id on the examples both "
        "scored (paired n; a row decoded on more examples than its control is paired on the ones "
        "they share): the mean difference of the primary metric with a 95% paired percentile "
        f"bootstrap CI ({N_BOOT:,} resamples, seed {SEED}); 'matched' when the shares are within "
        f"{MATCH:g}. p: for a metric scored 0 or 1, the exact McNemar test (a two-sided exact "
        "binomial test of the discordant pairs: examples one run got right and the other wrong); "
        "for a graded metric, two-sided from the bootstrap resamples. p (Holm): adjusted with "
        "Holm's step-down correction over the page's family, every run-vs-control pair of the "
        "page's paired tables (its transfer rows included). better / worse: the adjusted p is "
        f"below {ALPHA:g}, the sign of the difference the direction; otherwise no difference was "
        "detected.",
    ),
    (
        "def-apgr",
        "APGR",
        "RouteLLM's average gap recovered: the area under the gap recovered over large share in "
        "[0, 1], the curve anchored at (0, small-only) and (1, large-only); 0.5 = random mixing.",
    ),
    (
        "def-cpt",
        "CPT(x%)",
        "RouteLLM's cost to reach a performance: the least large-token share at which the "
        "interpolated curve recovers x% of the gap.",
    ),
    (
        "def-aiq",
        "AIQ",
        "RouterBench's average improvement in quality: the mean quality under the non-decreasing "
        "convex hull over large-token share in [0, 1], the small-only and large-only points added.",
    ),
    (
        "def-bytes",
        "GB moved/example",
        "memory traffic per example: per forward pass the model's weights plus the KV cache it "
        "reads, summed over the example; example-mean.",
    ),
    (
        "def-throughput",
        "throughput",
        "emitted tokens (examples) per wall second (hour) on the machine(s) that ran the run, all "
        "streams of a batch together (batch = sequences decoded at once); measured. × large-only: "
        "a run's tokens over those large-only would have emitted in the same wall time on the same "
        "machine, machine by machine (sum of tokens / sum of wall seconds x large-only's tok/s "
        "there). Large-only is 1.00× by definition; the rates on each machine are in the table "
        "'Large-only on each machine'. Machines are told apart by their recorded id or by the batch "
        "probe their invocations shared (A, B, ...: the setup table); large-only's rate on each "
        "pools the task's large-only run and its speed anchors (large-only on the first examples, "
        "decoded on a machine that ran too little of that run), from the invocations recorded "
        "quiet where the machine has some (others' processes used at most 0.25 cores meanwhile); "
        "'(contended)': the run has an invocation recorded busier; examples decoded on a machine "
        "where large-only never ran are left out of the ratio ('over K of N examples'; '—' where "
        "that is all of them). Runs that recorded no invocations: decode tok/s / large-only's.",
    ),
    (
        "def-modeled",
        "modeled throughput",
        "a run whose answers were taken from the small-only and large-only runs (query routers and "
        "the oracle, greedy: the same tokens) ran only its routing passes; its clock is modeled "
        "from the pass costs measured on its machine, so its throughput stands in the modeled "
        "columns, never beside measured ones. tok/s modeled on a hardware profile: the same tokens "
        "under the bandwidth cost model (harness/metrics/costmodel.py: seed-xeon-a100 = small on "
        "a Xeon, large on a remote A100 with an assumed 30 ms network round trip per large forward "
        "pass, modeled, not measured: docs/cloud.md measures that term over a link; h100 = both on "
        "one H100).",
    ),
    (
        "def-transfer",
        "transfer",
        "a run of a router trained on another task (its checkpoint's task): drawn hollow in the "
        "plot, marked in the tables and paired with the task's own control run at the nearest "
        "share, as in-task runs are.",
    ),
)
COST_DEFINITION = (
    "def-cost",
    "cost",
    "what each run took on the machine that ran it, from its manifest's invocations (each "
    "`hybridbench run` that decoded examples, resumed ones included): backends, batch sizes, "
    "examples and tokens decoded, wall hours on the clock summed, CPU hours (the run's process, "
    "its threads and its sandboxed tests, as each invocation recorded them; '≤' where some "
    "invocation recorded none: its wall hours times its machine's CPUs counted instead); "
    "examples/hour = examples / "
    "wall hours, for the runs that decoded their answers (a run that reused answers ran only "
    "its routing passes: its hours count, its rate is the modeled one of the Speed table). The "
    "speed anchors (anchors/MACHINE: large-only on the first examples, on a machine that "
    "decoded too little of large-only's run) are part of the sweep's cost too. 'all runs' sums "
    "the task's runs and anchors.",
)
DEVICE_DEFINITION = (
    "def-device",
    "measured on a GPU machine",
    "recorded runs replayed pass for pass with small on that machine's CPU and large on its "
    "GPU (benchmarks/device_latency.py, random weights of each model's shape on the engine each "
    "table names: transformers in bf16, or llama.cpp with the GGUF file's quantized types); "
    "measured tok/s [95% bootstrap CI over examples] beside the cost model for that machine "
    "(its copy-probe bandwidths) and for the project's h100 profile (the H100 datasheet's "
    "3,350 GB/s for large; on another card, such as an H200 (4,800 GB/s on its datasheet), that "
    "column is still the h100 profile's), no network. The replay decodes one example at a time, "
    "so its last column is per stream too: the row's tokens over its examples' recorded seconds "
    "on the sweep machine, each example one stream of its batch there (the Speed table's tok/s "
    "counts all streams of a batch).",
)

# table header -> the definition it links to (HTML)
HEADER_LINKS = {
    "quality [95% CI]": "def-quality",
    "large token share": "def-token-share",
    "large call share": "def-call-share",
    "gap recovered": "def-gap",
    "verdict": "def-paired",
    "p": "def-paired",
    "p (Holm)": "def-paired",
    "vs control": "def-paired",
    "APGR (token)": "def-apgr",
    "APGR (call)": "def-apgr",
    "CPT(50%)": "def-cpt",
    "CPT(80%)": "def-cpt",
    "AIQ": "def-aiq",
    "GB moved/example": "def-bytes",
    "tok/s measured": "def-throughput",
    "× large-only, measured": "def-throughput",
    "tok/s modeled": "def-modeled",
    "× large-only, modeled": "def-modeled",
}
