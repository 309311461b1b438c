"""The leaderboard across tasks: an edition's folders, the links between its pages, and the
index page with the headline matrix (per task and router: the gap recovered at <= 25% large
tokens, the verdict against the control, the throughput against large-only's).

An edition is a folder that holds no run folders itself but task folders that do:

    reports/published/            index.md, index.html       (written by reports.site)
    reports/published/gsm8k/      run folders; report/leaderboard.{md,html} (reports.leaderboard)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from reports.load import run_dirs
from reports.render import Page
from reports.tables import CONTROL_ROUTERS, Table
from reports.text import DEFINITIONS, GOAL_SHARE, n_mark, pct

INDEX = "index"  # the index page's file stem
SHOWN = ("def-gap", "def-goal", "def-paired", "def-throughput", "def-modeled", "def-transfer")


@dataclass(frozen=True)
class GoalEntry:
    """One router's quality goal on one task (or small-only's / large-only's run)."""

    router: str
    transfer: bool  # trained on another task
    setting: str  # its setting, written for reading
    share: float  # large-token share it realized
    gap: float  # gap recovered (PGR); NaN when small and large tie
    verdict: str  # against its control: better | worse | no difference | control | —
    measured: str  # throughput / large-only, measured ('—' where modeled)
    modeled: str  # throughput / large-only, modeled ('—' where measured)
    fewer: int = 0  # its examples, where fewer than the references' (its gap on those); else 0


@dataclass(frozen=True)
class TaskSummary:
    """What the index shows of one task page."""

    task: str
    metric: str
    split: str
    n: int  # examples per run (large-only's)
    q_small: float
    q_large: float
    entries: tuple[GoalEntry, ...]  # the quality goal per router, then small-only, large-only
    facts: dict  # reports.provenance.setup_facts, each a sorted tuple of text
    fewer: tuple[int, ...] = ()  # the example counts of runs on fewer examples than the references


def edition_tasks(root: Path) -> list[Path]:
    """The task folders of an edition (subfolders holding run folders), sorted; [] when `root`
    holds run folders itself (a task folder, or one run)."""
    if run_dirs(root):
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and run_dirs(p))


def site_nav(tasks: list[str], current: str | None, pages: dict | None = None) -> list:
    """The links atop a page: the index, each task, the definitions. `pages`: task -> page stem
    beside the index (one folder); default the edition's TASK/report/leaderboard."""
    up = "" if pages is not None or current is None else "../../"
    links = [
        (
            "Index",
            None if current is None else f"{up}{INDEX}.md",
            None if current is None else f"{up}{INDEX}.html",
        )
    ]
    for t in tasks:
        stem = pages[t] if pages is not None else f"{t}/report/leaderboard"
        here = t == current
        links.append((t, None if here else f"{up}{stem}.md", None if here else f"{up}{stem}.html"))
    return [*links, ("Definitions", "#definitions", "#definitions")]


def _cell(e: GoalEntry | None) -> str:
    """'79.5% · better · 0.64×' (modeled throughput marked so; a transfer run marked)."""
    if e is None:
        return "—"
    text, kind = (e.measured, "") if e.measured != "—" else (e.modeled, " modeled")
    ratio, _, notes = text.partition(" ")  # '1.18 (contended)': the ratio, then its notes
    speed = "—" if ratio == "—" else f"{ratio}×{kind}" + (f" {notes}" if notes else "")
    gap = pct(e.gap) + n_mark(e.fewer) + (" (transfer)" if e.transfer else "")
    return " · ".join([gap, *([e.verdict] if e.verdict != "—" else []), speed])


def _row_order(rows: dict[str, dict]) -> list[str]:
    """Deployable routers by their mean gap recovered over the tasks, best first; then the
    controls, the oracle (a bound) and the references."""
    tail = [*CONTROL_ROUTERS, "oracle", "large", "small"]

    def mean_gap(router: str) -> float:
        gaps = [e.gap for e in rows[router].values() if not math.isnan(e.gap)]
        return sum(gaps) / len(gaps) if gaps else -math.inf

    head = sorted((r for r in rows if r not in tail), key=lambda r: (-mean_gap(r), r))
    return head + [r for r in tail if r in rows]


def matrix(summaries: list[TaskSummary]) -> Table:
    """Router x task: each router's quality goal (`_cell`)."""
    rows: dict[str, dict] = {}
    for s in summaries:
        for e in s.entries:
            rows.setdefault(e.router, {})[s.task] = e
    body = tuple(
        (
            r if r not in ("small", "large") else f"{r} only",
            *(_cell(rows[r].get(s.task)) for s in summaries),
        )
        for r in _row_order(rows)
    )
    note = (
        f"Each cell: the gap recovered by the router's best run at <= {GOAL_SHARE:.0%} large "
        "tokens among its runs at the sweep's grid of shares (a row aimed at another row's "
        "share, as a matched control, is no extra draw) · its verdict against its control at a "
        "matched share (random; random_query for the query router), paired over the same examples, better or worse only where the "
        "exact test's p, Holm-adjusted over the task page's paired comparisons, is below 0.05 "
        "(the task page's paired table prints both) · its throughput against large-only's "
        "on the same machine (1.00× = large-only; 'modeled': the run reused the small-only and "
        "large-only answers, so its clock is modeled)"
        + (
            "; (n = N): the run scored the first N examples of the split, the references "
            "more, and its gap is against theirs on its N"
            if any(e.fewer for s in summaries for e in s.entries)
            else ""
        )
        + ". Rows: the routers by their mean gap "
        "recovered over the tasks, best first; then the controls, the oracle (a bound: it "
        "defers exactly where small's token would differ from large's) and the references."
    )
    header = ("router", *(s.task for s in summaries))
    return Table(
        f"Gap recovered at <= {GOAL_SHARE:.0%} large tokens",
        header,
        body,
        note,
        marks=True,
        wrap=True,
    )


def _union(summaries: list[TaskSummary], key: str) -> list[str]:
    return sorted({x for s in summaries for x in s.facts.get(key, ())})


def pair_line(summaries: list[TaskSummary]) -> str:
    """'Small qwen2.5-coder-0.5b-instruct, large qwen2.5-coder-1.5b-instruct; llama.cpp 0.3.36
    on 2-core AMD EPYC; runs started 2025-01-01 to 2025-01-03.' (the models by source name:
    their files' types and digests are in the setup)."""
    small, large = (
        ", ".join(sorted({x.split(" (")[0] for x in _union(summaries, k)})) or "—"
        for k in ("small", "large")
    )
    backends = ", ".join(_union(summaries, "backend")) or "—"
    cpus = ", ".join(_union(summaries, "cpu")) or "machines not recorded"
    dates = _union(summaries, "dates")
    when = f"; runs started {dates[0]}" if dates else ""
    when += f" to {dates[-1]}" if len(dates) > 1 else ""
    return f"Small {small}, large {large}; {backends} on {cpus}{when}."


def index_page(summaries: list[tuple[TaskSummary, str]], out: Path) -> Path:
    """Write `out`/index.{md,html}: the matrix, the tasks with links to their pages
    (`summaries`: each task's summary and its page's path from `out`, without suffix), the
    pair, the hardware, the dates and the definitions the matrix uses."""
    tasks = [s for s, _ in summaries]
    page = Page("hybridbench leaderboard")
    page.nav(site_nav([s.task for s in tasks], None, {s.task: stem for s, stem in summaries}))
    page.paragraph(
        "Which router recovers the most of the small-to-large quality gap while the large "
        f"model writes at most {GOAL_SHARE:.0%} of the tokens, is it better than routing at "
        "random, and how fast is it against the large model alone?",
        anchor="headline",
    )
    best = []
    for s in tasks:
        routers = [
            e for e in s.entries if e.router not in ("small", "large", "oracle", *CONTROL_ROUTERS)
        ]
        if routers:
            b = max(routers, key=lambda e: e.gap if not math.isnan(e.gap) else -math.inf)
            best.append(f"{s.task} **{b.router}** ({pct(b.gap)}, {b.verdict})")
    if best:
        page.paragraph("Best at the goal: " + "; ".join(best) + ".")
    page.paragraph(pair_line(tasks) + " [Setup](#setup).", note=True)
    page.table(matrix(tasks), level=2, anchor="matrix")
    page.heading("Tasks", 2, "tasks")
    page.bullets(
        [
            f"[{s.task}]({stem}.md): {s.metric} on {s.n} {s.split} examples; small-only "
            f"{s.q_small:.3f}, large-only {s.q_large:.3f}"
            for s, stem in summaries
        ]
    )
    page.heading("Setup", 2, "setup")
    dates = _union(tasks, "dates")
    page.bullets(
        [
            f"Small model: {'; '.join(_union(tasks, 'small')) or '—'}",
            f"Large model: {'; '.join(_union(tasks, 'large')) or '—'}",
            f"Hardware: {'; '.join(_union(tasks, 'cpu')) or 'not recorded'}; backend "
            f"{', '.join(_union(tasks, 'backend')) or '—'}, batch {', '.join(_union(tasks, 'batch'))}",
            f"Runs started {dates[0]} to {dates[-1]}" if dates else "Run dates not recorded",
        ]
    )
    page.definitions([d for d in DEFINITIONS if d[0] in SHOWN])
    return page.write(out, INDEX)
