"""The speed tables of a task page: throughput measured and modeled, large-only's rate on each
machine (the denominators of every ratio), and the rows replayed on a GPU machine.

Measured and modeled figures never share a column: a run that took its answers from other
runs (`--reuse-answers`) has a modeled clock, and its figures stand in the modeled columns.
Large-only's ratio to itself is 1.00 by definition.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from harness.core.run_folder import RunFolder
from harness.metrics import quality as metrics
from harness.metrics.costmodel import PROFILES, modeled_latency
from harness.metrics.machines import large_pool
from reports.load import decoded, setting_label
from reports.tables import Table, TaskRuns, ordered_runs, router_label
from reports.text import constants_note, is_modeled, num, ratio_cells

PROFILE_COLUMNS = ("seed-xeon-a100", "h100")


def large_note(task: TaskRuns) -> str:
    """What large-only's own run measured against the pooled rates it is 1.00 of, when that
    is not 1.00 (its invocations ran on a busier machine, or beside quieter anchors)."""
    large = task.runs[(task.runs["router"] == "large") & task.runs["n"].map(decoded)]
    own = [num(x, 2) for x in large.get("vs_large", []) if not math.isnan(float(x))]
    own = [x for x in own if x != "1.00"]
    if not own:
        return ""
    return (
        f"Large-only is 1.00 by definition; its own run measured {', '.join(own)} of the "
        "large-only rates pooled on its machines (see 'Large-only on each machine')."
    )


def speed_table(task: TaskRuns) -> Table:
    """Measured throughput per run, its modeled throughput where its clock is modeled, and
    modeled tokens per second on two hardware profiles."""
    rows = []
    for _, r in ordered_runs(task.all_runs, task.routers).iterrows():
        manifest = RunFolder(r["path"]).manifest()
        records = task.scores(r["path"])
        profiles = [modeled_latency(records, manifest, PROFILES[p]) for p in PROFILE_COLUMNS]
        rate = r.get("throughput_tok_per_s", math.nan) if decoded(r.get("n")) else math.nan
        per_hour = r.get("examples_per_hour", math.nan) if decoded(r.get("n")) else math.nan
        measured, modeled = ratio_cells(r)
        clock = (num(rate, 2), num(per_hour, 1), measured, "—", modeled)
        if is_modeled(r):  # answers reused: its decoding time is modeled
            clock = ("—", "—", measured, num(rate, 2), modeled)
        rows.append(
            (
                router_label(r),
                task.setting(r),
                num(r.get("batch", math.nan), 0),
                r.get("machines") or "—",
                *clock,
                *(num(m["modeled_tok_per_s"], 1) for m in profiles),
            )
        )
    header = (
        "router",
        "setting",
        "batch",
        "machines (examples)",
        "tok/s measured",
        "examples/hour measured",
        "× large-only, measured",
        "tok/s modeled",
        "× large-only, modeled",
        *(f"tok/s modeled, {p}" for p in PROFILE_COLUMNS),
    )
    note = " ".join(
        x
        for x in (
            "In the order of the Runs table, transfer runs last.",
            large_note(task),
            constants_note(task.constants, rows),
        )
        if x
    )
    title = "Throughput (measured) and modeled speed"
    return Table(title, header, tuple(rows), note, marks=True)


def large_table(df: pd.DataFrame, anchors: pd.DataFrame) -> Table:
    """Large-only's throughput on each machine, the denominator of every 'throughput /
    large-only' ratio: the task's large run and its speed anchors, pooled per machine."""
    runs = pd.concat([df[df["router"] == "large"], anchors], ignore_index=True).sort_values("run")
    by, calm = (
        {name: json.loads(x or "{}") for name, x in zip(runs["run"], runs.get(k, []), strict=True)}
        for k in ("machine_rates", "machine_rates_quiet")
    )
    rows = []
    for m, (quiet, used) in large_pool(by, list(by), calm).items():
        ex, tok, wall = (sum(d[k] for _, d in used) for k in ("examples", "tokens", "wall_s"))
        rows.append(
            (
                m,
                "; ".join(f"{name} ({int(d['examples'])})" for name, d in used),
                "recorded quiet" if quiet else "all (none recorded quiet)",
                num(ex, 0),
                num(tok, 0),
                num(wall, 0),
                num(tok / wall if wall else math.nan, 2),
            )
        )
    header = (
        "machine",
        "large-only runs (examples)",
        "invocations",
        "examples",
        "tokens",
        "wall seconds",
        "tok/s",
    )
    title = "Large-only on each machine (the throughput ratios' denominators)"
    return Table(title, header, tuple(rows))


def device_tables(paths: list[Path]) -> list[Table]:
    """One table per `benchmarks/device_latency.py` output: each replayed row measured on the GPU
    machine beside its modeled speed there, and large alone through transformers' `generate`."""
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
            rows.append(
                (
                    name,
                    args or "—",
                    str(s["n"]),
                    str(s["tokens"]),
                    num(s["large_token_share"]),
                    f"{num(s['measured_tok_per_s'], 1)} [{num(lo, 1)}, {num(hi, 1)}]",
                    num(s["modeled_tok_per_s_measured"], 1),
                    num(sheet, 1),
                    num(s["measured_tok_per_s"] / sheet),
                    num(s["recorded_tok_per_s_cpu_machine"], 1),
                )
            )
        g = d.get("generate_check") or {}
        for kind in ("eager", "static_compiled"):
            if f"{kind}_tok_per_s" in g:
                rows.append(
                    (
                        f"large alone, transformers generate ({kind})",
                        "—",
                        "1",
                        str(g["tokens"]),
                        num(1.0),
                        num(g[f"{kind}_tok_per_s"], 1),
                        "—",
                        "—",
                        "—",
                        "—",
                    )
                )
        engine = m.get("engine") or f"transformers {m['transformers']}, eager, bf16"
        title = (
            f"{path.name}: {m['cpu']}, {m['cpu_threads']} CPU threads + {m['gpu']}; "
            f"engine {engine}, torch {m['torch']}; "
            f"copy probes CPU {bw['cpu_probe']:.1f} GB/s, GPU {bw['gpu_copy']:.0f} GB/s"
        )
        header = (
            "row",
            "setting",
            "n",
            "tokens",
            "large token share",
            "tok/s measured [95% CI]",
            "tok/s modeled (probes)",
            "tok/s modeled (h100 profile)",
            "measured / modeled (h100 profile)",
            "tok/s per stream on the sweep machine",
        )
        tables.append(Table(title, header, tuple(rows)))
    return tables
