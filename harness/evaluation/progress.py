"""What an experiment's steps have done, read from their folders: whether each step is done and,
for `hybridbench experiment status`, the examples done of each run's target and the hours left at
this machine's rate. Reads files only (a task's split size loads its data).

A run's target is its --limit, or its split's size where that is smaller (--limit 1000 = all). Its
rate is this machine's: its sessions here, else its sessions elsewhere scaled by large-only's speed
here over there (the task's large row and speed anchors), else as measured elsewhere (said so). A
run not started yet is estimated at the mean rate of its step's started runs, else at the rate here
of its task's rows of its router, else of its target-share rows (`peer_rate`; said so); a control
run still to run likewise. With none of those, its hours are not guessed: it is counted apart.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from harness.backends.machine import machine_id
from harness.core.run_folder import COST_LOG, RunFolder, is_run
from harness.evaluation import controls as matched
from harness.evaluation.experiment import (
    Anchor,
    Command,
    Controls,
    Copy,
    Note,
    Publish,
    Runs,
    Select,
    Step,
    Verdicts,
)
from harness.evaluation.sweep import setting_name
from harness.metrics.machines import by_machine, rate_on, session_machines
from reports.load import ANCHORS, load_run_dirs, on_grid, run_dirs
from reports.publish import is_published
from reports.text import MATCH, nearest_share
from routers import parse_args
from tasks import get_task


@dataclass(frozen=True)
class RunState:
    """Where one run folder stands."""

    folder: Path
    done: int  # examples scored (failed ones not counted)
    target: int  # examples it must hold
    rate: float  # examples per hour on this machine (0: no session timed yet)
    basis: str  # how `rate` was found: harness.metrics.machines.rate_on

    @property
    def hours_left(self) -> float | None:
        left = max(self.target - self.done, 0)
        return 0.0 if not left else (left / self.rate if self.rate > 0 else None)


@cache
def split_size(task: str, task_args: tuple[str, ...], split: str, seed: int = 0) -> int:
    """How many examples the split holds."""
    return len(get_task(task, **parse_args(list(task_args))).split(split, seed=seed))


def target(runs: Runs) -> int:
    """The examples each of `runs`' folders must hold."""
    if runs.split == "all" and runs.limit is not None:
        return runs.limit
    size = split_size(runs.task, runs.task_args, runs.split)
    return size if runs.limit is None else min(runs.limit, size)


def holding(folder: Path, published: Path | None) -> Path:
    """`folder`, or its published copy when only that holds the run (working copies of a
    published edition leave the tree; the experiment restores them when it resumes)."""
    if published is None or is_run(folder):
        return folder
    return published if is_run(published) else folder


def run_state(folder: Path, want: int, published: Path | None = None) -> RunState:
    """`folder`'s examples done of `want` (or its `published` copy's), from its summary when that
    says it is complete, else from its records; its rate on this machine from its manifest's
    sessions and its task's large-only runs (`rate_on`)."""
    task, task_published = folder.parent, published.parent if published else None
    folder = holding(folder, published)
    run = RunFolder(folder)
    m = run.manifest() if run.exists() else {}
    rate, basis = rate_on(m, large_runs(task, task_published), machine_id()) if m else (0.0, "")
    s = run.summary()
    if s is not None and int(s.get("n") or 0) - int(s.get("n_failed") or 0) >= want:
        return RunState(folder, want, want, rate, basis)
    return RunState(folder, len(run.done()), want, rate, basis)


def large_runs(task: Path, published: Path | None = None) -> dict[str, dict]:
    """The manifests of a task folder's large-only runs by folder: its large rows and its speed
    anchors (the working copy's, and the published copy's that it lacks)."""
    rows = [d for d in held_runs(task, published) if d.name.split("__")[0] == "large"]
    anchors = held_runs(task / ANCHORS, published / ANCHORS if published else None)
    manifests = {str(d): RunFolder(d).manifest() for d in rows + anchors}
    return {name: m for name, m in manifests.items() if m.get("router") == "large"}


def run_states(runs: Runs) -> list[RunState]:
    want = target(runs)
    return [run_state(f, want, runs.published and runs.published / f.name) for f in runs.folders]


def held_runs(folder: Path, published: Path | None = None) -> list[Path]:
    """A task's run folders: its working copy's, and its published copy's that the working copy
    lacks. A working copy holds what was run since publishing (a later experiment's rows beside
    the edition's) until a step that runs restores the published ones into it."""
    own = run_dirs(folder, missing_ok=True)
    names = {d.name for d in own}
    theirs = run_dirs(published, missing_ok=True) if published else []
    return sorted(own + [d for d in theirs if d.name not in names], key=lambda d: d.name)


def task_runs(folder: Path, published: Path | None):
    """load_runs's rows for `held_runs`; None when the task has no run yet. Inside `one_reading`
    a task's rows are read once."""
    dirs = held_runs(folder, published)
    if not dirs:
        return None
    if _READ is None:
        return load_run_dirs(dirs)
    key = (folder, tuple(dirs))
    if key not in _READ:
        _READ[key] = load_run_dirs(dirs)
    return _READ[key].copy()


_READ: dict[tuple, object] | None = None  # inside one_reading: {(task folder, runs): rows}


@contextmanager
def one_reading():
    """Read each task's run folders once while inside (a status report asks for a task's rows
    at each of its steps; nothing it reads changes meanwhile but the run in progress)."""
    global _READ
    _READ = {}
    try:
        yield
    finally:
        _READ = None


def anchor_folder(folder: Path, n: int, published: Path | None = None) -> Path | None:
    """Where this machine's speed anchor goes when it needs one: when rows of the task were
    decoded here and large-only on fewer than `n` of its examples (speed ratios are taken within
    one machine, harness/metrics/machines.py); None when it needs none."""
    here = machine_id()
    manifests = {"here": {"sessions": [{"machine": {"id": here}}]}}
    for run in held_runs(folder, published):
        manifests[run.name] = RunFolder(run).manifest()
    labels = session_machines(manifests)
    mine = labels["here"][0]
    if not any(mine in machines for name, machines in labels.items() if name != "here"):
        return None  # nothing decoded here: no speed here to compare
    done = by_machine(manifests.get("large__default", {}), labels.get("large__default", []))
    if done.get(mine, {}).get("examples", 0) >= n:
        return None
    return folder / ANCHORS / here


def control_needs(step: Controls) -> list[tuple[str, float]] | None:
    """[(control, value of its setting)] for the control runs `step` still needs among its
    task's runs (`held_runs`), each row covered on as many of its examples as the step's runs
    decode; None while a router it pairs has no run there (its rows come first)."""
    df = task_runs(step.folder, step.published)
    if df is None or not {r for rs in step.pairs.values() for r in rs} <= set(df.router):
        return None
    # a row on more examples than the step decodes (an edition's whole-split row paired by an
    # experiment on the first 200) is paired on the step's examples: its controls hold those
    df = matched.with_targets(df)
    df = df.assign(target=df.target.clip(upper=target(step.examples)))
    if step.setting == "p":
        return matched.needed(df, dict(step.pairs))
    return aimed(df, step.pairs, step.setting)


def aimed(df, pairs, key: str) -> list[tuple[str, float]]:
    """[(router, value)]: per router of `pairs` (reports.load.load_runs's rows in `df`), its
    runs started and not finished (to resume them), then a run whose argument `key` (e.g.
    target_share) is aimed at the realized share of each row paired with it (its rows at the
    sweep's grid, `reports.load.on_grid`: a row aimed by another experiment asks for nothing)
    that no run of it covering the row's examples matches within MATCH: interpolated from its
    runs' `key` and realized shares as the controls are (`harness.evaluation.controls.aim`).
    A value one of its runs covering the row has is not asked again; one covering fewer examples
    is asked again at the row's count, and resumes."""
    out: list[tuple[str, float]] = []
    subject = on_grid(df)
    df = df.assign(setting_value=[json.loads(a).get(key) for a in df.router_args])
    df = matched.with_targets(df)
    for router, routers in pairs.items():
        own = df[df.router == router]
        valued = own[own.setting_value.notna()]
        out += [(r, x) for r, x in matched.unfinished(df, (router,)) if not math.isnan(x)]
        runs = valued[valued.large_token_share > 0]
        paired = df[df.router.isin(routers) & subject]
        for _, row in paired.sort_values("large_token_share").iterrows():
            share = row.large_token_share
            if math.isnan(share):
                continue
            covering = own[own.target >= row.target]  # runs covering the row's examples
            if ((covering.large_token_share - share).abs() <= MATCH).any():
                continue
            asked = {round(float(x), 3) for x in valued[valued.target >= row.target].setting_value}
            value = matched.aimed_value(runs, share)
            if value not in asked and (router, value) not in out:
                out.append((router, value))
    return out


def verdict_pairs(step: Verdicts) -> list[tuple[str, str, str]] | None:
    """(run, router of `against`, that router's run nearest the run's share, '' when none is
    within MATCH) per run of `step.routers` at the sweep's grid (`reports.load.on_grid`: a row
    aimed at another row's share is compared with, not a subject) among its task's runs
    (`held_runs`); None while they have no run there."""
    return pairs_in(step, task_runs(step.folder, step.published))


def pairs_in(step: Verdicts, df) -> list[tuple[str, str, str]] | None:
    """verdict_pairs over the task's runs already loaded (`task_runs`'s rows, or None)."""
    rows = df[df.router.isin(step.routers) & on_grid(df)] if df is not None else []
    if not len(rows):
        return None
    out = []
    for run, share in zip(rows.run, rows.large_token_share, strict=True):
        for other in step.against:
            near, gap = nearest_share(df[df.router == other], share)
            out.append((run, other, df.run[near] if gap <= MATCH else ""))
    return out


def compared(step: Verdicts, run: str, other: str) -> bool:
    """Whether the pair's verdict is there and pairs the examples both runs hold now: one made
    while a run was partial, or before a run was extended, pairs fewer than the smaller run's
    examples less both runs' failures, and is made again (so is one whose run has no summary:
    not finished)."""
    path = step.verdict(run, other)
    if not path.is_file():
        return False
    sizes = _sizes(step, (run, other))
    if None in sizes:
        return False
    paired = json.loads(path.read_text(encoding="utf-8")).get("n_paired")
    (n_run, failed_run), (n_other, failed_other) = sizes
    return paired is None or paired >= min(n_run, n_other) - failed_run - failed_other


def unfinished(step: Verdicts, run: str, other: str) -> list[str]:
    """The pair's runs that have not finished (no summary yet): its verdict waits for them."""
    return [
        r for r, size in zip((run, other), _sizes(step, (run, other)), strict=True) if size is None
    ]


def _sizes(step: Verdicts, runs) -> list[tuple[int, int] | None]:
    held = {d.name: d for d in held_runs(step.folder, step.published)}
    return [_scored(held[r]) if r in held else None for r in runs]


def _scored(folder: Path) -> tuple[int, int] | None:
    """(examples, failed) of a finished run's summary; None while it has none."""
    summary = RunFolder(folder).summary()
    if summary is None:
        return None
    return int(summary.get("n", 0)), int(summary.get("n_failed", 0) or 0)


def _anchor_state(step: Anchor, folder: Path) -> RunState:
    copy = step.published / ANCHORS / folder.name if step.published else None
    return run_state(folder, step.n, copy)


def _checkpoint_has(path: Path, key: str) -> bool:
    import torch  # only for a step that names done_stat

    return key in (torch.load(path, weights_only=True, map_location="cpu").get("stats") or {})


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def is_done(step: Step) -> bool:
    """Whether `step` has nothing left to do, judged from its folders."""
    if isinstance(step, Note):
        return True
    if isinstance(step, Command):
        if step.runs is not None:
            return all(s.done >= s.target for s in run_states(step.runs))
        if step.done is not None:
            if not step.done.is_file():
                return False
            if step.done_lines and _lines(step.done) < step.done_lines:
                return False
            return not step.done_stat or _checkpoint_has(step.done, step.done_stat)
        return False
    if isinstance(step, Anchor):
        folder = anchor_folder(step.task_folder, step.n, step.published)
        return folder is None or _anchor_state(step, folder).done >= step.n
    if isinstance(step, Controls):
        return control_needs(step) == []
    if isinstance(step, Verdicts):
        pairs = verdict_pairs(step)
        return pairs is not None and all(compared(step, r, o) for r, _, o in pairs if o)
    if isinstance(step, Select):
        return all((step.to / f).is_file() for f in step.files)
    if isinstance(step, Copy):
        held = [step.to] + ([step.published] if step.published else [])
        return all(any((d / f.name).is_file() for d in held) for f in step.files)
    if isinstance(step, Publish):
        return all(is_published(step.src / t, step.dest / t) for t in step.tasks)
    raise TypeError(f"not a step: {step!r}")


def _hours(h: float) -> str:
    return f"~{h:.1f} h"


PEERS = "the rate here of the task's other rows"
ELSEWHERE = {
    "scaled": "measured on another machine, scaled by large-only's speed here",
    "elsewhere": "measured on another machine; large-only not timed on both",
    "peers": f"not started: {PEERS}",
}


def peer_rate(task: Path, published: Path | None, router: str) -> float:
    """Examples per hour on this machine for a run of `router` on the task that has no session
    yet: the mean rate (`rate_on`) of the task's rows of that router, else of its rows set by a
    target share (entropy, confidence, learned, ...); 0 when none has one. An estimate: a
    router's rows at other shares, or another router's, decode at about its speed."""
    large, here = large_runs(task, published), machine_id()
    rates = {}
    for d in held_runs(task, published):
        m = RunFolder(d).manifest()
        rate = rate_on(m, large, here)[0] if m.get("sessions") else 0.0
        if rate > 0:
            rates[d.name] = rate
    for keep in (lambda name: name.split("__")[0] == router, lambda name: "target_share=" in name):
        chosen = [r for name, r in rates.items() if keep(name)]
        if chosen:
            return sum(chosen) / len(chosen)
    return 0.0


def _or_peers(s: RunState, published: Path | None) -> RunState:
    """`s`, or, when it has no rate, `s` at its task's peers' rate (`peer_rate`)."""
    if s.rate > 0 or s.done >= s.target:
        return s
    task, router = s.folder.parent, s.folder.name.split("__")[0]
    rate = peer_rate(task, published if published != task else None, router)
    return RunState(s.folder, s.done, s.target, rate, "peers") if rate > 0 else s


def control_runs(step: Controls, control: str, value: float) -> Runs:
    """The run folder a control run of `step` (`control` at its setting `value`) fills, and the
    examples it must hold."""
    folder = step.folder / f"{control}__{setting_name({step.setting: value})}"
    return replace(step.examples, folders=(folder,))


def _controls_hours(step: Controls, needs: list[tuple[str, float]]) -> tuple[float, int]:
    """(hours left for the control runs `needs` asks, how many have no rate), each at its own
    rate here where it has begun, else at its task's peers' (`peer_rate`)."""
    hours, unknown = 0.0, 0
    for control, value in needs:
        _, left, none = runs_status(control_runs(step, control, value))
        hours, unknown = hours + left, unknown + none
    return hours, unknown


def _one_run(s: RunState) -> tuple[str, float, int]:
    """('done 40/200, 160 to go, ~1.9 h at 85 examples/h', hours left, 1 when no rate yet)
    for a run not yet done."""
    text = f"done {s.done}/{s.target}, {s.target - s.done} to go"
    if s.rate > 0:
        note = f" ({ELSEWHERE[s.basis]})" if s.basis in ELSEWHERE else ""
        text += f", {_hours(s.hours_left)} at {s.rate:.0f} examples/h{note}"
        return text, s.hours_left, 0
    return text + " (no rate measured yet)", 0.0, 1


def runs_status(runs: Runs) -> tuple[str, float, int]:
    """('3 of 9 runs done; 420 examples to go, ~5.2 h', hours left, runs with no rate)."""
    states = run_states(runs)
    rates = [s.rate for s in states if s.rate > 0]
    mean = sum(rates) / len(rates) if rates else 0.0
    left = [s for s in states if s.done < s.target]
    if not left:
        each = {s.target for s in states}
        n = f"{each.pop()} examples each" if len(each) == 1 else "their examples"
        return f"done ({len(states)} run{'s' * (len(states) > 1)}, {n})", 0.0, 0
    if len(states) == 1:
        return _one_run(_or_peers(states[0], runs.published))
    hours, unknown, peers = 0.0, 0, 0
    for s in left:
        rate = s.rate or mean
        if not rate:
            rate = _or_peers(s, runs.published).rate
            peers += rate > 0
        if rate > 0:
            hours += (s.target - s.done) / rate
        else:
            unknown += 1
    to_go = sum(s.target - s.done for s in left)
    text = f"{len(states) - len(left)} of {len(states)} runs done; {to_go} examples to go"
    if hours:
        text += f", {_hours(hours)}"
        away = [s.basis for s in left if s.rate > 0 and s.basis in ELSEWHERE]
        if away:
            scaled = away.count("scaled")
            text += f" ({len(away)} of them at rates measured on other machines"
            text += f", {scaled} scaled by large-only's speed here)" if scaled else ")"
        if peers:
            text += f" ({peers} not started, at {PEERS})"
    if unknown:
        text += f" (+ {unknown} run{'s' * (unknown > 1)} with no rate measured yet)"
    return text, hours, unknown


def training_hours(folder: Path, out: str | None = None) -> float:
    """The wall hours of the invocations in a training folder's cost.jsonl (those whose --out
    was `out`, when given: calibrations share one folder)."""
    path = folder / COST_LOG
    hours = 0.0
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        argv = row.get("argv") or []
        if out is None or ("--out" in argv[:-1] and argv[argv.index("--out") + 1] == out):
            hours += float(row.get("wall_s") or 0) / 3600
    return hours


def status(step: Step) -> tuple[str, float, int]:
    """(one line on where `step` stands, hours left at measured rates, runs with no rate)."""
    if isinstance(step, Note):
        return "note", 0.0, 0
    if isinstance(step, Command) and step.runs is not None:
        return runs_status(step.runs)
    if isinstance(step, Command):
        folder = step.done.parent if step.done is not None else None
        out = step.argv[step.argv.index("--out") + 1] if "--out" in step.argv[:-1] else None
        hours = training_hours(folder, out) if folder and folder.is_dir() else 0.0
        spent = f"; {hours:.2f} h so far" if hours else ""
        finished = is_done(step)  # once: with done_stat it loads the checkpoint
        if step.progress is not None and not finished and step.progress.is_file():
            spent = f"; {_lines(step.progress)} lines in {step.progress.name}" + spent
        if step.done is None:
            return f"runs every time (it resumes itself){spent}", 0.0, 0
        return (
            ("done" if finished else f"to do ({step.done.name} not there yet)") + spent,
            0,
            0,
        )
    if isinstance(step, Anchor):
        folder = anchor_folder(step.task_folder, step.n, step.published)
        if folder is None:
            return "not needed on this machine (no row decoded here without large-only)", 0, 0
        state = _anchor_state(step, folder)
        done = state.done >= step.n
        text, hours, unknown = (f"done {state.done}/{step.n}", 0.0, 0) if done else _one_run(state)
        return f"{text}, into {folder}", hours, unknown
    if isinstance(step, Controls):
        needs = control_needs(step)
        if needs is None:
            return "after the rows", 0.0, 0
        if not needs:
            return "done (every router has a control within 2 points of its share)", 0.0, 0
        runs = ", ".join(f"{c} {step.setting}={p}" for c, p in needs)
        hours, unknown = _controls_hours(step, needs)
        at = f", {_hours(hours)}" if hours else ""
        none = f" (+ {unknown} with no rate yet)" if unknown else ""
        text = f"to run: {runs}{at}{none} (then up to {step.rounds - 1} more rounds)"
        return text, hours, unknown
    if isinstance(step, Verdicts):
        pairs = verdict_pairs(step)
        if pairs is None:
            return "after the rows", 0.0, 0
        both = [(r, o) for r, _, o in pairs if o]
        written = sum(compared(step, r, o) for r, o in both)
        alone = len(pairs) - len(both)
        unmatched = f" ({alone} with no row within {MATCH:g})" if alone else ""
        text = f"{written} of {len(both)} matched pairs compared{unmatched}"
        return ("done, " if written == len(both) else "") + text, 0.0, 0
    return ("done" if is_done(step) else "to do"), 0.0, 0
