"""The leaderboard: a page per task (Markdown, static HTML, PNGs) and, for an edition of several
task folders, an index across them (reports.site).

    >>> write_report("runs/sweep1")                 # -> runs/sweep1/report/leaderboard.html
    >>> write_report("reports/published")           # an edition: each TASK/report/ + index.html
    hybridbench report reports/published

A task page reads from the answer down: the headline, the quality goal (each router's best run
at <= 25% large tokens), the main plot, the paired verdicts against the controls, the runs
(collapsed), the speed, then setup, cost and provenance (collapsed) and the definitions.

Output is a function of the results folder only: rows are sorted, numbers formatted at fixed
precision, PNGs carry no date or software stamp, and the only times shown are those read from
the manifests, so re-running on the same folder gives byte-identical files.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from harness.errors import UserError
from reports.load import add_speed, decoded, flag, load_runs
from reports.plots import CAPTIONS, PLOTS
from reports.provenance import cost_table, provenance_table, setup_facts, setup_table
from reports.render import Page, md_table
from reports.site import GoalEntry, TaskSummary, edition_tasks, index_page, pair_line, site_nav
from reports.speed import device_tables, large_table, speed_table
from reports.tables import (
    CONTROL_ROUTERS,
    CONTROLS,
    EMPTY,
    ENDS,
    UNCOMPARED,
    Table,
    TaskRuns,
    control_of,
    gap,
    goal_runs,
    goal_table,
    paired_table,
    router_metrics,
    routers_table,
    runs_table,
    transfer_table,
)
from reports.text import (
    COST_DEFINITION,
    DEFINITIONS,
    DEVICE_DEFINITION,
    GOAL_SHARE,
    MATCH,
    n_mark,
    pct,
    quality_cell,
    ratio_cells,
    ratio_text,
)

__all__ = [  # also what other modules import from here
    "CONTROLS",
    "CONTROL_ROUTERS",
    "EMPTY",
    "ENDS",
    "GOAL_SHARE",
    "MATCH",
    "UNCOMPARED",
    "Table",
    "control_of",
    "device_tables",
    "quality_cell",
    "router_metrics",
    "write_report",
]
MAIN_PLOT = "quality_vs_share"
MORE_PLOTS = ("quality_vs_call_share", "share_vs_setting", "bytes_per_model")
SPEED_PLOTS = ("throughput_vs_setting",)


def _md_table(t: Table) -> str:
    """The table in Markdown (reports.render.md_table)."""
    return md_table(t)


def _speed_cell(r) -> str:
    """A run's throughput / large-only's in one cell, '(modeled)' where its clock is: for
    tables that show one figure per run (benchmarks/paper_tables.py)."""
    return ratio_text(r) + (" (modeled)" if flag(r, "throughput_modeled") else "")


def slug(task: str) -> str:
    """A file-name-safe form of a task name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", task) or "task"


def _entry(r, task: TaskRuns) -> GoalEntry:
    """The index's view of one goal run (or of small-only / large-only)."""
    verdict = "—"
    if r["router"] in CONTROL_ROUTERS:
        verdict = "control"
    elif r["router"] not in ENDS:
        verdict = task.pairing(r).verdict
    measured, modeled = ratio_cells(r)
    return GoalEntry(
        r["router"],
        flag(r, "transfer"),
        task.setting(r),
        float(r["large_token_share"]),
        gap(r),
        verdict,
        measured,
        modeled,
        int(r["n"]) if r.get("on_fewer") else 0,
    )


def summarize_task(task: TaskRuns, facts: dict) -> TaskSummary:
    """What the index shows of a task: its references and each router's quality goal."""
    q_small, q_large = task.references()
    entries = [_entry(r, task) for r in goal_runs(task.all_runs)]
    for ref in ("small", "large"):
        runs = task.runs[(task.runs["router"] == ref) & task.runs["n"].map(decoded)]
        entries += [_entry(r, task) for _, r in runs.iloc[:1].iterrows()]
    df = task.runs
    large = df.loc[df["router"] == "large", "n"]
    n = int(large.iloc[0]) if len(large) else int(df["n"].max())
    return TaskSummary(
        str(df["task"].iloc[0]),
        str(df["metric"].iloc[0]),
        str(df["split"].iloc[0]),
        n,
        q_small,
        q_large,
        tuple(entries),
        {k: tuple(sorted(map(str, v))) for k, v in facts.items()},
        tuple(sorted({int(n) for n in task.all_runs.loc[task.all_runs["on_fewer"], "n"]})),
    )


def headline(s: TaskSummary) -> list[str]:
    """The page's first sentences: the references, the best router at the quality goal
    against random, and which routers beat their control there."""
    refs = (
        f"Small-only scores **{s.q_small:.3f}** and large-only **{s.q_large:.3f}** "
        f"{s.metric} on {s.n} {s.split} examples"
    )
    if s.fewer:  # some rows kept an earlier edition's n
        counts = " / ".join(map(str, s.fewer))
        refs += (
            f"; the rows marked n = {counts} scored the first {counts} of them, the others all {s.n}. Each gap recovered is "
            "against small-only and large-only on the run's own examples, and each paired "
            "verdict is on the examples both runs scored."
        )
    else:
        refs += ", the same for every run."
    say = [refs]
    routers = [e for e in s.entries if e.router not in (*ENDS, "oracle", *CONTROL_ROUTERS)]
    if routers and not math.isnan(s.q_large - s.q_small):
        best = max(routers, key=lambda e: e.gap if not math.isnan(e.gap) else -math.inf)
        speed = best.measured if best.measured != "—" else f"{best.modeled} (modeled)"
        random = [e for e in s.entries if e.router == "random"]
        tail = f"; random recovers {pct(random[0].gap)} there" if random else ""
        say.append(
            f"At <= {GOAL_SHARE:.0%} large tokens the best router, **{best.router}**"
            f"{' (transfer)' if best.transfer else ''} ({best.setting}), recovers "
            f"**{pct(best.gap)}**{n_mark(best.fewer)} of the gap at {best.share:.3f} large tokens "
            f"and {speed}× "
            f"large-only's throughput{tail}."
        )
        by = {
            v: [e.router + (" (transfer)" if e.transfer else "") for e in routers if e.verdict == v]
            for v in ("better", "no difference", "worse")
        }
        said = [
            f"{v} than their control at a matched share: {', '.join(r)}"
            if v != "no difference"
            else f"no difference detected: {', '.join(r)}"
            for v, r in by.items()
            if r
        ]
        if said:
            say.append(said[0][0].upper() + "; ".join(said)[1:] + ".")
    return say


def _figures(page: Page, df: pd.DataFrame, names, out: Path, task: str) -> None:
    for name in names:
        png = PLOTS[name](df)
        file = f"{name}_{slug(task)}.png"
        (out / file).write_bytes(png)
        page.figure(name, CAPTIONS[name], png, file)


def task_page(
    df: pd.DataFrame,
    anchors: pd.DataFrame,
    device: list[Table],
    out: Path,
    nav: list | None = None,
    stem: str = "leaderboard",
) -> tuple[Path, TaskSummary]:
    """Write one task's page (`stem`.md, `stem`.html, its PNGs) into `out`; `df`: its runs with
    their speed (reports.load.add_speed), `anchors`: its speed anchors, `device`: GPU rows."""
    task = TaskRuns.of(df)
    name = str(df["task"].iloc[0])
    costed = "sessions" in df and df["sessions"].gt(0).any()
    summary = summarize_task(task, setup_facts(df))
    page = Page(f"hybridbench leaderboard: {name}")
    if nav:
        page.nav(nav)
    for i, sentence in enumerate(headline(summary)):
        page.paragraph(sentence, anchor="headline" if i == 0 else "")
    setup = " [Setup](#setup)." if costed else ""
    page.paragraph(pair_line([summary]) + setup, note=True)
    out.mkdir(parents=True, exist_ok=True)
    page.table(goal_table(task), level=2, anchor="goal")
    page.heading("Quality against the large model's share", 2, "plot", md_level=3)
    _figures(page, task.all_runs, [MAIN_PLOT], out, name)
    page.table(paired_table(task), level=2, anchor="paired")
    if len(task.transfer):
        page.table(
            paired_table(task, transfer=True, title="Transfer: paired vs control at the same share")
        )
    with page.details("Runs, curve metrics and more plots", anchor="runs"):
        page.table(runs_table(task))
        page.table(routers_table(task))
        if len(task.transfer):
            page.table(transfer_table(task))
        page.heading("Plots", 3)
        _figures(page, task.runs, MORE_PLOTS, out, name)
    page.table(speed_table(task), level=2, anchor="speed")
    with page.details("Large-only on each machine and throughput by setting"):
        if costed:
            page.table(large_table(task.all_runs, anchors))
        _figures(page, task.runs, SPEED_PLOTS, out, name)
    if device:
        with page.details("Measured on a GPU machine", anchor="device"):
            for t in device:
                page.table(t)
    if costed:
        with page.details("Setup", anchor="setup"):
            page.table(setup_table(task.all_runs))
        with page.details("Cost", anchor="cost"):
            page.table(cost_table(task.all_runs, anchors))
    with page.details("Provenance", anchor="provenance"):
        page.table(provenance_table(task.all_runs))
    extra = [*([COST_DEFINITION] if costed else []), *([DEVICE_DEFINITION] if device else [])]
    page.definitions([*DEFINITIONS, *extra])
    return page.write(out, stem), summary


def _folder(results_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, list[Table]]:
    """A folder's runs with their speed, its speed anchors and its GPU rows."""
    df = load_runs(results_dir)
    if not len(df):
        raise UserError(f"no runs (run folders) under {str(results_dir)!r}")
    if not any(decoded(n) for n in df["n"]):  # n: the examples a run scored
        raise UserError(
            f"{results_dir}: its {len(df)} run(s) scored no example yet, so there is nothing to "
            "report; finish them first (the same `hybridbench run` resumes each)"
        )
    # speed anchors (large-only on another machine) label machines and pool large's rates with
    # the runs, and are shown only in the large-only table
    both = add_speed(df, with_anchors=True)
    device = device_tables(list((results_dir / "device").glob("*.json")))
    return both[~both["anchor"]], both[both["anchor"]], device


def write_report(results_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write the leaderboard of `results_dir`; return the path of its HTML front page.

    A folder of run folders (one task): OUT/leaderboard.{md,html} and the PNGs, OUT defaulting
    to RESULTS_DIR/report; of several tasks: a page per task (leaderboard-TASK.*) and an index.
    An edition (no run folders, task folders of them): OUT/TASK/report/ per task folder and
    OUT/index.{md,html} across them, OUT defaulting to RESULTS_DIR itself, so that its
    TASK/report/ is where `write_report(RESULTS_DIR/TASK)` would write too.
    """
    root = Path(results_dir)
    tasks = edition_tasks(root)
    if tasks:
        out = Path(out_dir) if out_dir is not None else root
        summaries = []
        for folder in tasks:
            df, anchors, device = _folder(folder)
            nav = site_nav([t.name for t in tasks], folder.name)
            page, summary = task_page(df, anchors, device, out / folder.name / "report", nav)
            summaries.append((summary, f"{folder.name}/report/leaderboard"))
        return index_page(summaries, out)
    out = Path(out_dir) if out_dir is not None else root / "report"
    df, anchors, device = _folder(root)
    names = sorted(df["task"].unique())
    if len(names) == 1:
        return task_page(df, anchors, device, out)[0]
    summaries = []
    for name in names:
        stem = f"leaderboard-{slug(name)}"
        nav = site_nav(names, name, pages={n: f"leaderboard-{slug(n)}" for n in names})
        mine = anchors[anchors["task"] == name] if len(anchors) else anchors
        _, summary = task_page(df[df["task"] == name], mine, device, out, nav, stem)
        summaries.append((summary, stem))
    return index_page(summaries, out)
