"""The leaderboard: tables of runs and routers per task, written as Markdown, static HTML and PNGs.

    >>> write_report("runs/sweep1", "runs/sweep1/report")   # -> .../leaderboard.html
    python -m reports runs/sweep1 runs/sweep1/report

Output is a function of the results folder only: rows are sorted, numbers formatted at fixed
precision, PNGs carry no date or software stamp, and the only times shown are the `started`
fields read from manifests, so re-running on the same folder gives byte-identical files.
"""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.errors import UserError
from harness.metrics import quality as metrics
from harness.metrics.costmodel import PROFILES, modeled_latency
from harness.metrics.frontier import aiq, apgr, cpt, pgr
from reports.load import (
    REFERENCES,
    RUN_ORDER,
    add_speed,
    decoded,
    load_runs,
    read_records,
    setting_label,
)
from reports.plots import CAPTIONS, PLOTS, reference

GB = 1e9
CONTROLS = {"query": "random_query"}  # the control of each router; the others: `random`
CONTROL_ROUTERS = ("random", *CONTROLS.values())
UNCOMPARED = (*REFERENCES, *CONTROL_ROUTERS)  # rows that are not compared to a control
ENDS = ("small", "large")  # the controls at shares 0 and 1: the same policies
MATCH = 0.02  # large-token shares within 2 points count as matched
GOAL_SHARE = 0.25  # the quality goal: the most of the gap recovered at <= 25% large tokens


def control_of(router: str) -> str:
    """The control a router is paired with at a matched share."""
    return CONTROLS.get(router, "random")


DEFINITIONS = (
    "quality: mean of the task's primary metric over non-failed examples; "
    "[95% CI] is a seeded percentile bootstrap of that mean.",
    "large token share: tokens emitted by the large model / all emitted tokens (token-weighted).",
    "large call share: decode steps in which the large model ran a forward pass / all decode steps.",
    "APGR (RouteLLM): area under PGR = (q - q_small) / (q_large - q_small) over large share "
    "in [0, 1], the curve anchored at (0, small only) and (1, large only); 0.5 = random mixing.",
    f"Quality goal: per router, its run with the highest quality among those at a large-token "
    f"share <= {GOAL_SHARE:g}; recovered = PGR of that quality; its throughput / large-only's "
    "on the same machine (see Throughput; modeled where marked); the "
    "oracle's row: the share at which the "
    "oracle (large's token wherever small's would differ) reaches its quality.",
    "CPT(x%) (RouteLLM): least large-token share at which the interpolated curve reaches PGR x%.",
    "AIQ (RouterBench): mean quality under the non-decreasing convex hull over large-token "
    "share in [0, 1], with the small-only and large-only points added.",
    "GB moved/example: bytes moved per example, per forward pass the model's weights plus the KV cache "
    "it reads; example-mean.",
    "Paired vs control: each router's run against the run of its control (random; random_query "
    "for query; small-only and large-only count as either at shares 0 and 1, being the same policies) whose large-token share is nearest, on the examples both scored: mean difference "
    f"of the primary metric with a 95% paired bootstrap CI; 'matched' when the shares are within "
    f"{MATCH:g}. better / worse: the CI excludes 0; otherwise no difference was detected.",
    "Throughput: emitted tokens (examples) per wall second (hour) on the machine(s) that ran "
    "the run, all streams of a batch together (batch = sequences decoded at once); measured. "
    "Throughput / large-only: a run's tokens over those large-only would have emitted in the "
    "same wall time on the same machine, machine by machine (sum of tokens / sum of wall x "
    "large-only's tok/s there); machines are told apart by recorded id or by the batch probe "
    "their sessions shared (A, B, ...: the setup table), large-only's rate on each pools the "
    "task's large row and its speed anchors (large-only on the first examples, decoded on a "
    "machine that ran too little of the row), their sessions recorded quiet alone where the "
    "machine has some (sessions record the CPU other processes used meanwhile from "
    "2026-11-24 on; 'quiet': at most 0.25 cores); '(contended)': the run has a session with "
    "more; examples decoded on a machine where large-only never ran are left out of the ratio "
    "('over K of N examples'; '—' where that is all of them). "
    "Runs that predate recorded sessions: decode tok/s / large-only's. "
    "Modeled tok/s: the same tokens under the bandwidth cost model of a hardware profile "
    "(harness/metrics/costmodel.py: seed-xeon-a100 = small on a Xeon, large on a remote A100; h100 = "
    "both on one H100); modeled, not measured.",
    "Transfer: runs of routers trained on another task (their checkpoint's task) are listed "
    "apart and left out of the runs, routers and plots above them; each is paired with the "
    "task's own control run at the nearest share, as in-task rows are.",
)
COST_DEFINITION = (
    "Cost: what each run took on the machine that ran it, from its manifest's sessions (one per "
    "`hybridbench run` invocation that decoded examples, resumed ones included): backends, batch "
    "sizes, examples and tokens decoded, wall hours on the clock summed; examples/hour = "
    "examples / wall hours. Rows that take their answers from other runs (--reuse-answers) "
    "count only their own routing passes; the speed anchors (anchors/MACHINE: large-only on the "
    "first examples, on a machine that decoded too little of large's row) are part of the sweep's "
    "cost too. 'all runs' sums the task's rows and anchors."
)
DEVICE_DEFINITION = (
    "Measured on a GPU machine: recorded runs replayed pass for pass with small on that "
    "machine's CPU and large on its GPU (scripts/device_latency.py, random weights of each "
    "model's shape on the engine each table names: transformers in bf16, or llama.cpp with the "
    "GGUF file's quantized types); measured tok/s [95% bootstrap CI over examples] beside "
    "the cost model for that machine (its copy-probe bandwidths) and for the project's h100 "
    "profile (the H100 datasheet's 3,350 GB/s for large; on another card, such as an H200 "
    "(4,800 GB/s on its datasheet), that column is still the h100 profile's), no network. "
    "The replay decodes one example at a time, so its last column is per stream too: "
    "the row's tokens over its examples' recorded seconds on the sweep machine, each example "
    "one stream of its batch there (the Throughput table's tok/s counts all streams of a batch)."
)


@dataclass(frozen=True)
class Table:
    """A table as text cells, rendered to both Markdown and HTML."""

    title: str  # section heading
    header: tuple[str, ...]  # column names
    rows: tuple[tuple[str, ...], ...]  # formatted cells, one tuple per row


def _num(x, digits: int = 3) -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "—"
    return "—" if math.isnan(x) else f"{x:.{digits}f}"


def quality_cell(row) -> str:
    """A run's quality with its 95% interval: '0.250 [0.170, 0.330]'."""
    return f"{_num(row['quality'])} [{_num(row['quality_ci_low'])}, {_num(row['quality_ci_high'])}]"


def _pct(x) -> str:
    return "—" if x is None or math.isnan(float(x)) else f"{100 * float(x):.1f}%"


def slug(task: str) -> str:
    """A file-name-safe form of a task name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", task) or "task"


def router_metrics(df: pd.DataFrame) -> pd.DataFrame:
    """Per non-reference router of one task: APGR on both share axes, CPT(50/80%) and AIQ.

    The references are the mean qualities of the task's `small` and `large` runs; every metric is
    NaN when either is missing (see `harness.metrics.frontier` for the definitions).
    """
    q_small, q_large = reference(df, "small", "quality"), reference(df, "large", "quality")
    rows = []
    for router, g in df[~df["router"].isin(REFERENCES)].groupby("router"):
        g = g[g["n"].map(decoded)]  # a run with no example yet has no quality and no share
        tok, call, q = g["large_token_share"], g["large_call_share"], g["quality"]
        refs_ok = not (math.isnan(q_small) or math.isnan(q_large))
        if not len(g):  # nothing measured: not the random line that empty curves would give
            rows.append({"router": router, "settings": 0})
            continue
        rows.append(
            {
                "router": router,
                "settings": len(g),
                "apgr_token": apgr(tok, q, q_small, q_large),
                "apgr_call": apgr(call, q, q_small, q_large),
                "cpt50": cpt(tok, q, q_small, q_large, 0.5),
                "cpt80": cpt(tok, q, q_small, q_large, 0.8),
                "aiq": aiq([*tok, 0.0, 1.0], [*q, q_small, q_large], (0.0, 1.0))
                if refs_ok
                else math.nan,
            }
        )
    out = pd.DataFrame(
        rows, columns=["router", "settings", "apgr_token", "apgr_call", "cpt50", "cpt80", "aiq"]
    )
    key = out["apgr_token"].fillna(-math.inf)
    return (
        out.assign(_k=-key).sort_values(["_k", "router"]).drop(columns="_k").reset_index(drop=True)
    )


def _ordered_runs(df: pd.DataFrame, routers: pd.DataFrame) -> pd.DataFrame:
    rank = {r: i for i, r in enumerate(("large", "small", *routers["router"]))}
    df = df.assign(_rank=df["router"].map(lambda r: rank.get(r, len(rank))))
    df = df.sort_values(["_rank", *(k for k in RUN_ORDER if k in df.columns)], na_position="last")
    return df.drop(columns="_rank")


def runs_table(df: pd.DataFrame, routers: pd.DataFrame) -> Table:
    """The leaderboard proper: one row per run, references first, then routers by APGR."""
    apgr_of = dict(
        zip(
            routers["router"],
            zip(routers["apgr_token"], routers["apgr_call"], strict=True),
            strict=True,
        )
    )
    rows = []
    for _, r in _ordered_runs(df, routers).iterrows():
        a_tok, a_call = apgr_of.get(r["router"], (math.nan, math.nan))
        rows.append(
            (
                r["router"],
                r["setting"] or "—",
                f"{int(r['n'])}" + (f" ({int(r['n_failed'])} failed)" if r["n_failed"] else ""),
                quality_cell(r),
                _num(r["large_token_share"]),
                _num(r["large_call_share"]),
                _num(a_tok),
                _num(a_call),
                _num(r.get("bytes_total", math.nan) / GB, 2),
                _num(r.get("bytes_large", math.nan) / GB, 2),
                _speed_cell(r),
            )
        )
    header = (
        "router",
        "setting",
        "n",
        "quality [95% CI]",
        "large token share",
        "large call share",
        "APGR (token)",
        "APGR (call)",
        "GB moved/example",
        "of which large",
        "throughput / large-only",
    )
    return Table("Runs", header, tuple(rows))


def goal_table(df: pd.DataFrame) -> Table:
    """The quality goal, per router: its best run at a large-token share <= GOAL_SHARE (the
    oracle's run whatever its share), the gap it recovers and its speed relative to large's."""
    q_small, q_large = reference(df, "small", "quality"), reference(df, "large", "quality")
    df = df if "vs_large" in df else add_speed(df)
    best = []
    for router, g in df[~df["router"].isin(REFERENCES)].groupby("router"):
        if router != "oracle":
            g = g[g["large_token_share"] <= GOAL_SHARE]
        if len(g):
            best.append(g.sort_values(["quality", "run"], ascending=[False, True]).iloc[0])
    best.sort(key=lambda r: (-r["quality"], r["router"]))  # PGR's order where there is a gap
    rows = []
    for r in best:
        rows.append(
            (
                r["router"],
                r["setting"] or "—",
                _num(r["large_token_share"]),
                quality_cell(r),
                _pct(pgr(r["quality"], q_small, q_large)),
                _speed_cell(r),
            )
        )
    header = ("router", "setting", "large token share", "quality [95% CI]", "gap recovered",
              "throughput / large-only")  # fmt: skip
    title = f"Quality goal: the most of the small-to-large gap at <= {GOAL_SHARE:g} large tokens"
    return Table(title, header, tuple(rows))


def _decoded(r) -> bool:
    """Whether the run of row `r` has decoded any example (`reports.load.decoded`)."""
    return decoded(r.get("n"))


def _modeled(r) -> str:
    """' (modeled)' for a run whose answers came from other runs (its clock is modeled)."""
    return " (modeled)" if str(r.get("throughput_modeled")) == "True" else ""


def _speed_cell(r) -> str:
    """A run's throughput / large-only's on the same machine(s) (`reports.load.add_speed`),
    marked where it is modeled, where other processes were recorded busy meanwhile, and where
    some of its examples ran on a machine large-only never ran on (left out of the ratio)."""
    busy = " (contended)" if str(r.get("contended")) == "True" else ""
    ratio, part, whole = (float(r.get(k, math.nan)) for k in
                          ("vs_large", "vs_large_examples", "speed_examples"))  # fmt: skip
    partial = not math.isnan(ratio) and part < whole
    over = f" (over {part:.0f} of {whole:.0f} examples)" if partial else ""
    return _num(ratio, 2) + _modeled(r) + busy + over


def routers_table(routers: pd.DataFrame) -> Table:
    """One row per router: its curve's APGR on both axes, CPT(50%), CPT(80%) and AIQ."""
    rows = tuple(
        (
            r["router"],
            str(r["settings"]),
            _num(r["apgr_token"]),
            _num(r["apgr_call"]),
            _pct(r["cpt50"]),
            _pct(r["cpt80"]),
            _num(r["aiq"]),
        )
        for _, r in routers.iterrows()
    )
    header = ("router", "settings", "APGR (token)", "APGR (call)", "CPT(50%)", "CPT(80%)", "AIQ")
    return Table("Routers", header, rows)


def _scores(path: str, cache: dict) -> list[dict]:
    if path not in cache:
        cache[path] = read_records(path)
    return cache[path]


def paired_table(
    df: pd.DataFrame, cache: dict, controls: pd.DataFrame | None = None,
    title: str = "Paired vs control at the same share",
) -> Table:  # fmt: skip
    """Every router's run against its control's run at the nearest large-token share, paired;
    the controls are taken from `controls` (default: `df` itself; the transfer rows take the
    task's own random runs)."""
    controls = df if controls is None else controls
    rows = []
    for _, r in df[~df["router"].isin(UNCOMPARED)].iterrows():
        control = control_of(r["router"])
        if not _decoded(r):  # nothing to pair yet
            rows.append((r["router"], r["setting"] or "—", "—", "nothing decoded yet",
                         "—", "0", "—", "—"))  # fmt: skip
            continue
        # small-only and large-only are every control's end points (random at p = 0 and 1)
        pool = controls[controls["router"].isin([control, *ENDS])]
        gap = (pool["large_token_share"] - r["large_token_share"]).abs().fillna(math.inf)
        matched = bool(len(pool)) and gap.min() <= MATCH
        if not (matched or (pool["router"] == control).any()):  # an end alone must be matched
            rows.append((r["router"], r["setting"] or "—", _num(r["large_token_share"]),
                         f"no {control} run", "—", "—", "—", "—"))  # fmt: skip
            continue
        c = pool.loc[gap.idxmin()]
        d = metrics.paired_difference(
            _scores(r["path"], cache), _scores(c["path"], cache), r["metric"]
        )
        verdict = "better" if d["ci_low"] > 0 else "worse" if d["ci_high"] < 0 else "no difference"
        rows.append(
            (
                r["router"],
                r["setting"] or "—",
                _num(r["large_token_share"]),
                f"{c['router']} {c['setting'] or ''}".strip(),
                _num(c["large_token_share"]) + ("" if matched else " (not matched)"),
                str(d["n"]),
                f"{d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]" if d["n"] else "—",
                verdict if d["n"] else "—",
            )
        )
    header = ("router", "setting", "large token share", "control", "its share", "paired n",
              "difference [95% CI]", "verdict")  # fmt: skip
    return Table(title, header, tuple(rows))


def speed_table(df: pd.DataFrame, routers: pd.DataFrame, cache: dict) -> Table:
    """Measured throughput per run, and modeled tokens per second on two hardware profiles."""
    import json

    rows = []
    for _, r in _ordered_runs(df, routers).iterrows():
        manifest = json.loads((Path(r["path"]) / "manifest.json").read_text(encoding="utf-8"))
        records = _scores(r["path"], cache)
        modeled = [modeled_latency(records, manifest, PROFILES[p]) for p in PROFILE_COLUMNS]
        decoded = _decoded(r)  # a run just started has no rate yet
        rate = r.get("throughput_tok_per_s", math.nan) if decoded else math.nan
        per_hour = r.get("examples_per_hour", math.nan) if decoded else math.nan
        # answers reused from small-only / large-only runs: their decoding time is modeled
        mark = _modeled(r) if decoded else ""
        rows.append(
            (
                r["router"],
                r["setting"] or "—",
                _num(r.get("batch", math.nan), 0),
                r.get("machines") or "—",
                _num(rate, 2) + mark,
                _num(per_hour, 1) + mark,
                _speed_cell(r),
                *(_num(m["modeled_tok_per_s"], 1) for m in modeled),
            )
        )
    header = ("router", "setting", "batch", "machines (examples)", "tok/s (measured)",
              "examples/hour (measured)", "throughput / large-only, same machine",
              *(f"tok/s modeled, {p}" for p in PROFILE_COLUMNS))  # fmt: skip
    return Table("Throughput (measured) and modeled speed", header, tuple(rows))


PROFILE_COLUMNS = ("seed-xeon-a100", "h100")


def large_table(df: pd.DataFrame, anchors: pd.DataFrame) -> Table:
    """Large-only's throughput on each machine, the denominator of every 'throughput /
    large-only' ratio: the task's large row and its speed anchors, pooled per machine."""
    import json

    from harness.metrics.machines import large_pool

    runs = pd.concat([df[df["router"] == "large"], anchors], ignore_index=True).sort_values("run")
    by, calm = ({name: json.loads(x or "{}") for name, x in zip(runs["run"], runs.get(k, []),
                                                                strict=True)}
                for k in ("machine_rates", "machine_rates_quiet"))  # fmt: skip
    rows = []
    for m, (quiet, used) in large_pool(by, list(by), calm).items():
        ex, tok, wall = (sum(d[k] for _, d in used) for k in ("examples", "tokens", "wall_s"))
        rows.append((
            m, "; ".join(f"{name} ({int(d['examples'])})" for name, d in used),
            "recorded quiet" if quiet else "all (none recorded quiet)",
            _num(ex, 0), _num(tok, 0), _num(wall, 0), _num(tok / wall if wall else math.nan, 2),
        ))  # fmt: skip
    header = ("machine", "large-only runs (examples)", "sessions", "examples", "tokens",
              "wall seconds", "tok/s")  # fmt: skip
    title = "Large-only on each machine (the throughput ratios' denominators)"
    return Table(title, header, tuple(rows))


def device_tables(paths: list[Path]) -> list[Table]:
    """One table per `scripts/device_latency.py` output: each replayed row measured on the GPU
    machine beside its modeled speed there, and large alone through transformers' `generate`."""
    import json

    tables = []
    for path in sorted(paths):
        d = json.loads(path.read_text(encoding="utf-8"))
        m, bw = d["machine"], d["bandwidth_gbs"]
        rows = []
        for name, row in d["rows"].items():
            s, ex = row.get("summary"), row["examples"]
            if not s:
                continue
            lo, hi = metrics.ratio_ci([e["tokens"] for e in ex], [e["measured_s"] for e in ex])
            sheet = s["modeled_tok_per_s_datasheet"]
            args = setting_label(row["router_args"])  # no calibration file path
            rows.append((name, args or "—", str(s["n"]), str(s["tokens"]),
                         _num(s["large_token_share"]),
                         f"{_num(s['measured_tok_per_s'], 1)} [{_num(lo, 1)}, {_num(hi, 1)}]",
                         _num(s["modeled_tok_per_s_measured"], 1), _num(sheet, 1),
                         _num(s["measured_tok_per_s"] / sheet),
                         _num(s["recorded_tok_per_s_cpu_machine"], 1)))  # fmt: skip
        g = d.get("generate_check") or {}
        for kind in ("eager", "static_compiled"):
            if f"{kind}_tok_per_s" in g:
                rows.append((f"large alone, transformers generate ({kind})", "—", "1",
                             str(g["tokens"]), _num(1.0), _num(g[f"{kind}_tok_per_s"], 1),
                             "—", "—", "—", "—"))  # fmt: skip
        engine = m.get("engine") or f"transformers {m['transformers']}, eager, bf16"
        title = (f"{path.name}: {m['cpu']}, {m['cpu_threads']} CPU threads + {m['gpu']}; "
                 f"engine {engine}, torch {m['torch']}; "
                 f"copy probes CPU {bw['cpu_probe']:.1f} GB/s, GPU {bw['gpu_copy']:.0f} GB/s")  # fmt: skip
        header = ("row", "setting", "n", "tokens", "large token share",
                  "tok/s measured [95% CI]", "tok/s modeled (probes)",
                  "tok/s modeled (h100 profile)", "measured / modeled (h100 profile)",
                  "tok/s per stream on the sweep machine")  # fmt: skip
        tables.append(Table(title, header, tuple(rows)))
    return tables


def transfer_table(df: pd.DataFrame) -> Table:
    """Runs of routers trained on another task."""
    rows = tuple(
        (
            r["router"],
            r["setting"] or "—",
            str(r.get("router_trained_on") or "—"),
            f"{int(r['n'])}",
            quality_cell(r),
            _num(r["large_token_share"]),
            _num(r["large_call_share"]),
        )
        for _, r in df.sort_values(["router", "setting", "run"]).iterrows()
    )
    header = ("router", "setting", "trained on", "n", "quality [95% CI]", "large token share",
              "large call share")  # fmt: skip
    return Table("Transfer: routers trained on another task", header, rows)


def _backends(small: str, large: str) -> str:
    small, large = small or "—", large or "—"
    return small if small == large else f"{small} / {large}"


def cost_table(df: pd.DataFrame, anchors: pd.DataFrame | None = None) -> Table:
    """Each run's sessions summed (reports.load.session_totals), then each speed anchor's, and
    all of them together: what the task's sweep took."""
    df = df.sort_values("run")
    if anchors is not None and len(anchors):
        df = pd.concat([df, anchors.sort_values("run")], ignore_index=True)

    def hours(seconds: float) -> str:
        return f"{seconds / 3600:.2f}"

    def per_hour(examples: int, seconds: float) -> str:
        return f"{examples / (seconds / 3600):.1f}" if seconds > 0 else "—"

    rows = [
        (
            r["run"],
            _backends(r["backend_small"], r["backend_large"]),
            r["session_batches"] or "—",
            str(int(r["sessions"])),
            str(int(r["session_examples"])),
            str(int(r["session_tokens"])),
            hours(r["session_wall_s"]),
            per_hour(int(r["session_examples"]), r["session_wall_s"]),
        )
        for _, r in df.iterrows()
    ]
    examples, wall = int(df["session_examples"].sum()), float(df["session_wall_s"].sum())
    rows.append(
        ("all runs", "", "", str(int(df["sessions"].sum())), str(examples),
         str(int(df["session_tokens"].sum())), hours(wall), per_hour(examples, wall))
    )  # fmt: skip
    header = ("run", "backend (small / large)", "batch", "sessions", "examples", "tokens",
              "wall hours", "examples/hour")  # fmt: skip
    return Table("Cost: wall time on the machine that ran each run", header, tuple(rows))


def _machine_text(cpu: str, mach: dict, probe: dict | None) -> str:
    """'id ab0be9c69195, AMD EPYC, 2 CPUs, avx/avx2/fma/f16c, probe 2026-11-24: large's
    16-sequence step 0.678 s (others' CPU meanwhile: not recorded)':
    one brand covered machines 1.5x apart in speed, so the SIMD extensions (recorded from
    2026-11-24 on) and the batch probe's slowest measured step tell them apart; the id
    (recorded from 2026-11-24 on) names one machine across task folders, whose labels are
    each their own."""
    text = f"id {mach['id']}, " if mach.get("id") else ""
    text += f"{cpu}, {mach.get('cpus', '?')} CPUs"
    if mach.get("cpu_features"):
        text += ", " + "/".join(mach["cpu_features"])
    steps = ((probe or {}).get("step_seconds") or {}).get("large") or {}
    if steps:
        b = max(steps, key=int)
        # a router's own step shape (speculative: k + 1 tokens per sequence) costs more
        tokens = ((probe.get("shape") or {}).get("large") or [1, 1])[1]
        each = f" of {tokens} tokens each" if tokens > 1 else ""
        busy = probe.get("others_cores")  # recorded from 2026-11-24 19:49 on
        busy = "not recorded" if busy is None else f"{float(busy):.2f} cores"
        text += (f", probe {str(probe.get('measured', '?'))[:10]}: large's {b}-sequence step"
                 f"{each} {float(steps[b]):.3f} s (others' CPU meanwhile: {busy})")  # fmt: skip
    return text


def setup_table(df: pd.DataFrame) -> Table:
    """What the runs were made with, from their manifests and sessions: machines, dates, code
    commits, models (source, GGUF types, sha256), backends, batch sizes, decoding."""
    import json

    df = df if "session_machines" in df else add_speed(df)
    found: dict[str, set] = {k: set() for k in ("machine", "dates", "commit", "small", "large",
                                                "backend", "batch", "decoding")}  # fmt: skip
    latest: dict[str, tuple[str, str]] = {}  # machine label -> its latest session's description
    for path, labels in zip(df["path"], df["session_machines"], strict=True):
        m = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
        sessions = m.get("sessions") or []
        labels = json.loads(labels)
        for i, where in enumerate([m, *sessions]):
            mach = {**(m.get("machine") or {}), **(where.get("machine") or {})}
            cpu = mach.get("cpu") or (where.get("batch_probe") or {}).get("cpu")  # older runs
            if cpu and i:  # a session: described under its machine's label
                text = _machine_text(cpu, mach, where.get("batch_probe"))
                when = str(where.get("started", ""))
                if when >= latest.get(labels[i - 1], ("", ""))[0]:
                    latest[labels[i - 1]] = (when, text)
            elif cpu and not sessions:
                found["machine"].add(_machine_text(cpu, mach, where.get("batch_probe")))
            if where.get("git_commit"):
                found["commit"].add(str(where["git_commit"])[:12])
            if where.get("started"):
                found["dates"].add(str(where["started"])[:10])
            if "batch" in where and where is not m:
                found["batch"].add(int(where["batch"]))
        for role in ("small", "large"):
            info = (m.get("models") or {}).get(role) or {}
            if info:
                found[role].add(f"{info.get('source', '?')} ({info.get('dtype', '?')}; "
                                f"sha256 {str(info.get('sha256', ''))[:12]})")  # fmt: skip
                found["backend"].add(str(info.get("backend", "?")))
        found["decoding"].add(f"temperature {m.get('temperature', '?')}, "
                              f"max new tokens {m.get('max_new_tokens', '?')}")  # fmt: skip
    found["machine"] |= {f"{label}: {text}" for label, (_, text) in latest.items()}
    if not found["machine"]:  # runs from before sessions kept their machine
        found["machine"] = {"not recorded (see the provenance table)"}
    dates = sorted(found.pop("dates"))
    rows = [("dates", f"{dates[0]} to {dates[-1]}" if dates else "—")]
    names = {"machine": "machines", "commit": "code commits", "small": "small model",
             "large": "large model", "backend": "backends", "batch": "batch sizes",
             "decoding": "decoding"}  # fmt: skip
    rows += [(names[k], "; ".join(str(x) for x in sorted(v)) or "—") for k, v in found.items()]
    return Table("Setup (from the run manifests)", ("", "value"), tuple(rows))


def provenance_table(df: pd.DataFrame) -> Table:
    """Where each run came from: commit, start time and models, as the manifests say."""
    rows = tuple(
        (
            r["run"],
            r["router"],
            r["setting"] or "—",
            str(r["git_commit"])[:12],
            str(r["started"]),
            str(r["model_small"]),
            str(r["model_large"]),
        )
        for _, r in df.sort_values("run").iterrows()
    )
    header = ("run", "router", "setting", "commit", "started", "small model", "large model")
    return Table("Provenance", header, rows)


EMPTY = "No runs for this table in this folder."


def _md_table(t: Table) -> str:
    if not t.rows:  # a header with nothing under it reads as a rendering fault
        return f"_{EMPTY}_"

    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines)


def _html_table(t: Table) -> str:
    if not t.rows:
        return f"<p><em>{html.escape(EMPTY)}</em></p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.header)

    def cell(c: str) -> str:
        # a number (with its interval or a note) stays on one line; text may wrap, also longer
        # text that merely starts with a digit (a list of commits: it widened its column past
        # the page)
        attr = ' class="num"' if NUMERIC.match(c) and len(c) <= NUM_CELL_MAX else ""
        return f"<td{attr}>{html.escape(c)}</td>"

    body = "\n".join("<tr>" + "".join(cell(c) for c in row) + "</tr>" for row in t.rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


CSS = (
    "body{font-family:sans-serif;margin:2em;max-width:1300px}"
    "table{border-collapse:collapse;margin:1em 0;font-size:14px}"
    "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}"
    "th{background:#f0f0f0}tr:nth-child(even){background:#fafafa}"
    "img{max-width:100%;display:block;margin:0.5em 0}td.num{white-space:nowrap}"
    "figure{margin:1.5em 0}figcaption{font-weight:bold}"
)
NUMERIC = re.compile(r"^[-+]?(\d|—$)")
NUM_CELL_MAX = 32  # characters: '+0.260 [+0.195, +0.330]' is 23


def add_tables(md: list[str], body: list[str], tables: list[Table]) -> None:
    """Append each table under its heading to the Markdown lines and the HTML body."""
    for t in tables:
        md += [f"### {t.title}", "", _md_table(t), ""]
        body += [f"<h3>{html.escape(t.title)}</h3>", _html_table(t)]


def write_report(results_dir: str | Path, out_dir: str | Path) -> Path:
    """Write leaderboard.md, leaderboard.html (plots embedded) and the PNGs; return the HTML path."""
    df = load_runs(results_dir)
    if not len(df):
        raise UserError(f"no runs (folders with manifest.json) under {str(results_dir)!r}")
    # speed anchors (large-only on another machine) label machines and pool large's rates with
    # the runs, and are shown only in the large-only table
    both = add_speed(df, with_anchors=True)
    df, anchors = both[~both["anchor"]], both[both["anchor"]]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = f"hybridbench leaderboard: {Path(results_dir).resolve().name}"
    md, body = [f"# {title}", ""], [f"<h1>{html.escape(title)}</h1>"]
    cache: dict = {}
    costed = False
    for task, g_all in df.groupby("task", sort=True):
        moved = g_all["transfer"].fillna(False).astype(bool) if "transfer" in g_all else None
        g = g_all[~moved] if moved is not None else g_all
        routers = router_metrics(g)
        heading = f"Task {task} (metric {g['metric'].iloc[0]}, split {g['split'].iloc[0]})"
        md += [f"## {heading}", ""]
        body.append(f"<h2>{html.escape(heading)}</h2>")
        # the headline first (the runs, the quality goal, the plots), then the details, then
        # where the runs came from: a reader on a laptop sees the result before scrolling
        add_tables(md, body, [runs_table(g, routers), goal_table(g)])
        md += ["### Plots", ""]
        body.append("<h3>Plots</h3>")
        for name, plot in PLOTS.items():
            png = plot(g)
            file = f"{name}_{slug(str(task))}.png"
            (out / file).write_bytes(png)
            md += [f"*{CAPTIONS[name]}*", "", f"![{name}]({file})", ""]
            data = base64.b64encode(png).decode("ascii")
            body.append(
                f"<figure><figcaption>{html.escape(CAPTIONS[name])}</figcaption>"
                f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}"></figure>'
            )
        tables = [routers_table(routers), paired_table(g, cache), speed_table(g, routers, cache)]
        if moved is not None and moved.any():
            tables.append(transfer_table(g_all[moved]))
            title = "Transfer: paired vs control at the same share"
            tables.append(paired_table(g_all[moved], cache, controls=g, title=title))
        if "sessions" in g_all and g_all["sessions"].gt(0).any():
            costed = True
            mine = anchors[anchors["task"] == task] if len(anchors) else anchors
            tables += [large_table(g_all, mine), setup_table(g_all), cost_table(g_all, mine)]
        add_tables(md, body, [*tables, provenance_table(g_all)])
    device = device_tables(list((Path(results_dir) / "device").glob("*.json")))
    if device:
        md += ["## Measured on a GPU machine", ""]
        body.append("<h2>Measured on a GPU machine</h2>")
    add_tables(md, body, device)
    definitions = (
        *DEFINITIONS,
        *([COST_DEFINITION] if costed else []),
        *([DEVICE_DEFINITION] if device else []),
    )
    md += ["## Definitions", "", *[f"- {d}" for d in definitions], ""]
    body += [
        "<h2>Definitions</h2>",
        "<ul>",
        *[f"<li>{html.escape(d)}</li>" for d in definitions],
        "</ul>",
    ]
    (out / "leaderboard.md").write_text("\n".join(md), encoding="utf-8", newline="\n")
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
    html_path = out / "leaderboard.html"
    html_path.write_text(page, encoding="utf-8", newline="\n")
    return html_path
