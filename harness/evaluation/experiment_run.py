"""Running an experiment's steps (harness/evaluation/experiment.py) in order, resumably:

    run(spec, execute, lock="/tmp/hybridbench-heavy.lock")   # `hybridbench experiment run`
    plan(spec)     # the command lines it would run now, nothing runs (`experiment plan`)
    report(spec)   # per step: done, examples done of target, hours left (`experiment status`)
    verdicts(spec) # the verdict steps' paired differences as tables (`experiment verdicts`)

A step its folders say is done is skipped without loading anything; any other is handed to
`execute` (the command line's runner of one `hybridbench` command line), and the run folders it
writes resume per example. A step that loads models holds the heavy lock (an exclusive `flock`
on the file `lock`) while it runs, so that one heavy job runs at a time on a machine and others
take turns between steps. A failed step is reported and the next one runs, as its inputs allow;
publishing waits until every other step is done. After each step that ran, the steps are expanded
again from the files, so that a checkpoint a step trained adds its router's rows to the same run.
A speed anchor found not needed (nothing decoded on this machine yet) is looked at again before
publishing and at the end, so that rows a later step decoded here get theirs in the same run.
Ctrl-C or SIGTERM stops the step under way as it stops `hybridbench run` (its records and
manifest written) and ends the experiment; the same command resumes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.evaluation import drain
from harness.evaluation.experiment import (
    Anchor,
    Command,
    Controls,
    Copy,
    Note,
    Publish,
    Select,
    Spec,
    Step,
    Verdicts,
    published,
    steps,
)
from harness.evaluation.progress import (
    anchor_folder,
    compared,
    control_needs,
    is_done,
    one_reading,
    run_states,
    status,
    unfinished,
    verdict_pairs,
)
from harness.evaluation.verdict_table import verdict_table
from reports.publish import restore

# Runs one `hybridbench` command line (without the program name) in this process -> its exit
# status; the command line provides it (`harness.cli.experiment.execute`).
Execute = Callable[[tuple[str, ...]], int]
INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C or SIGTERM


@contextlib.contextmanager
def held(lock: str | None, say: Callable[[str], None] = print) -> Iterator[None]:
    """Hold an exclusive flock on the file `lock` (created if missing); no lock when None."""
    if not lock:
        yield
        return
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"   waiting for {lock}: another heavy job holds it")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def command_line(argv) -> str:
    return shlex.join(["hybridbench", *argv])


def _call(argv, execute: Execute, lock: str | None, say, heavy: bool = True) -> int:
    if drain.asked():  # a step of several commands: none begins after a drain
        raise drain.Drained
    say(f"   {command_line(argv)}")
    with held(lock if heavy else None, say):
        rc = execute(tuple(argv))
    if rc == INTERRUPTED:
        raise drain.Drained if drain.asked() else KeyboardInterrupt
    return rc


def _select(step: Select) -> str:
    """Copy the best candidate's files; return its folder's name and score."""
    file, _, keys = step.metric.partition(":")
    scores = {}
    for folder in sorted(Path(p) for p in glob.glob(step.candidates)):
        if (folder / file).is_file() and folder.resolve() != step.to.resolve():
            value = json.loads((folder / file).read_text())
            for key in keys.split(".") if keys else []:
                value = value[key]
            scores[folder] = float(value)
    if not scores:
        raise FileNotFoundError(f"no candidate {step.candidates} holds {file}")
    best = max(scores, key=lambda f: (scores[f], f.name))
    step.to.mkdir(parents=True, exist_ok=True)
    for name in step.files:
        shutil.copy2(best / name, step.to / name)
    return f"{best.name} ({keys or file} {scores[best]:.4g}, of {len(scores)})"


def _restore(spec: Spec, say) -> bool:
    """Bring back the working copies of published runs (compressed) before a step runs: rows
    resume from them and reuse their answers."""
    for task in spec.tasks:
        pub = published(spec, task)
        copied = restore(pub, spec.out / task.name) if pub else []
        if copied:
            say(f"   {len(copied)} runs of {task.name} restored from {pub}")
    return True


def perform(step: Step, execute: Execute, lock: str | None, say) -> int:
    """Do `step`; its exit status (0 when it did all it had to)."""
    if isinstance(step, Command):
        return _call(step.argv, execute, lock, say, step.heavy)
    if isinstance(step, Anchor):
        folder = anchor_folder(step.task_folder, step.n, step.published)
        return (
            0 if folder is None else _call((*step.argv, "--out", str(folder)), execute, lock, say)
        )
    if isinstance(step, Controls):
        for round_ in range(1, step.rounds + 1):
            needs = control_needs(step)
            if needs is None:
                say(f"   {step.folder}: no rows to pair yet")
                return 1
            if not needs:
                break
            say(f"   round {round_}: {', '.join(f'{c} {step.setting}={p}' for c, p in needs)}")
            for control, p in needs:
                rc = _call(step.command(control, p), execute, lock, say)
                if rc:
                    return rc
        return 0
    if isinstance(step, Verdicts):
        return _verdicts(step, execute, say)
    if isinstance(step, Select):
        try:
            say(f"   chosen: {_select(step)}")
        except (FileNotFoundError, KeyError, ValueError, TypeError) as e:
            say(f"   cannot choose: {e}")
            return 1
        return 0
    if isinstance(step, Copy):
        missing = [f for f in step.files if not f.is_file()]
        for f in step.files:
            if f.is_file():
                step.to.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, step.to / f.name)
        for f in missing:
            say(f"   {f} not found")
        return 1 if missing else 0
    if isinstance(step, Publish):
        return _call(step.argv, execute, lock, say, heavy=False)
    return 0


def _verdicts(step: Verdicts, execute: Execute, say) -> int:
    """Compare each matched pair not compared yet; a verdict that flags the run (compare's exit
    status 1: worse than the other, or slower) is an answer here, not a failure."""
    pairs = verdict_pairs(step)
    if pairs is None:
        say(f"   {step.folder}: no run of {', '.join(step.routers)} yet")
        return 1
    step.to.mkdir(parents=True, exist_ok=True)
    failed = 0
    for run, router, other in pairs:
        if not other:
            say(f"   {run}: no {router} run within 2 points of its share")
        elif waits := unfinished(step, run, other):
            say(f"   {run} vs {other}: waits for {', '.join(waits)} to finish")
        elif not compared(step, run, other):
            rc = _call(step.command(run, other), execute, None, say, heavy=False)
            failed += rc not in (0, 1) or not step.verdict(run, other).is_file()
    return 1 if failed else 0


def settled(step: Step, rc: int) -> bool:
    """Whether a step that just ran leaves nothing for publishing to wait for: its files say it
    is done; or it has no files to say so (a command that resumes itself, the controls after their
    rounds: a share that a few rounds did not match is left to the next run) and it did not fail."""
    if is_done(step):
        return True
    no_marker = isinstance(step, Command) and step.done is None and step.runs is None
    return (no_marker or isinstance(step, Controls)) and not rc


def _next(todo: list[Step], seen: list[Step]) -> Step | None:
    """The first step not taken yet. Before publishing, and at the end, a speed anchor taken
    already comes again, once, when rows decoded since on this machine have made it needed (an
    anchor step before the aimed rows and controls finds nothing decoded here on a new machine)."""
    step = next((s for s in todo if s not in seen), None)
    if step is None or isinstance(step, Publish):
        again = (s for s in todo if isinstance(s, Anchor) and seen.count(s) == 1)
        return next((s for s in again if not is_done(s)), step)
    return step


def run(spec: Spec, execute: Execute, lock: str | None = None, say=print) -> int:
    """Run the steps of `spec` not done yet (see the module docstring); 0 when all are done
    after it, 1 when a step failed or is still not done. KeyboardInterrupt stops it."""
    todo, seen = steps(spec), []
    failed, pending, restored = [], [], False
    say(f"experiment {spec.name}: {len(todo)} steps -> {spec.out}")
    while (step := _next(todo, seen)) is not None:
        seen.append(step)
        head = f"[{todo.index(step) + 1}/{len(todo)}] {step.label}"
        if isinstance(step, Note):
            say(f"{head}")
            continue
        if is_done(step):
            say(f"{head}: done")
            continue
        if isinstance(step, Publish) and pending:
            say(f"{head}: waits until every step is done ({len(pending)} not done)")
            pending.append(step)
            continue
        if drain.asked():  # asked while the step before ran outside a run (or between runs)
            say(f"stopped before {head} (drained); the same command resumes it")
            raise drain.Drained
        if not restored:
            restored = _restore(spec, say)
        say(f"== {time.strftime('%H:%M:%S')} {head}")
        try:
            rc = perform(step, execute, lock, say)
        except KeyboardInterrupt:
            say(f"stopped in {head}; the same command resumes it")
            raise
        if rc:
            failed.append(head)
            say(f"!! {head}: exited {rc}")
        if not settled(step, rc):
            pending.append(step)
        todo = steps(spec)  # what it wrote may add steps (its checkpoint: its rows)
    left = sum(s in todo for s in pending)  # (a step expanded again since has its own)
    say(
        f"experiment {spec.name}: {len(todo) - left} of {len(todo)} steps done"
        + (f", {len(failed)} failed:" if failed else "")
    )
    for head in failed:
        say(f"  {head}")
    return 1 if failed or pending else 0


def plan(spec: Spec) -> list[str]:
    """Per step: its label and the command line it runs now (nothing runs); steps already done
    are marked so, and a step decided when reached says how."""
    out = [f"# experiment {spec.name} -> {spec.out}"]
    for i, step in enumerate(steps(spec), 1):
        head = f"# [{i}] {step.label}"
        if isinstance(step, Note):
            out.append(head)
            continue
        if (
            isinstance(step, Anchor)
            and anchor_folder(step.task_folder, step.n, step.published) is None
        ):
            out += [
                f"{head}: not needed now",
                "#   decided when reached, and again before publishing: large-only into "
                f"{step.task_folder}/anchors/MACHINE_ID when rows were decoded on this "
                f"machine and large-only on fewer than {step.n} examples",
            ]
            continue
        if is_done(step):
            out.append(f"{head}: done")
            continue
        out.append(head)
        if isinstance(step, Command | Publish):
            out.append(command_line(step.argv))
        elif isinstance(step, Anchor):
            folder = anchor_folder(step.task_folder, step.n, step.published)
            out.append(command_line((*step.argv, "--out", str(folder))))
        elif isinstance(step, Controls):
            needs = control_needs(step) or []
            out += [command_line(step.command(control, p)) for control, p in needs]
            if step.setting == "p":
                out.append(
                    f"#   once the rows are done: the controls they need, up to "
                    f"{step.rounds} rounds (`hybridbench controls FOLDER` lists them)"
                )
            else:
                routers = sorted({r for rs in step.pairs.values() for r in rs})
                out.append(
                    f"#   once the rows are done: {', '.join(step.argv)} by {step.setting}, "
                    f"aimed at each {', '.join(routers)} row's share none of their rows "
                    f"matches, up to {step.rounds} rounds"
                )
        elif isinstance(step, Verdicts):
            pairs = verdict_pairs(step) or []
            out += [
                command_line(step.command(r, o))
                for r, _, o in pairs
                if o and not compared(step, r, o)
            ]
            out.append(
                f"#   once the rows are done: each {', '.join(step.routers)} run against "
                f"the {', '.join(step.against)} run nearest its share (within 2 points), "
                f"verdicts into {step.to}"
            )
        elif isinstance(step, Select):
            out.append(
                f"#   the folder {step.candidates} with the largest {step.metric}: "
                f"{', '.join(step.files)} copied into {step.to}"
            )
        elif isinstance(step, Copy):
            out.append(f"#   {', '.join(map(str, step.files))} copied into {step.to}")
    return out


def report(spec: Spec) -> list[str]:
    """Per step: where it stands; then the steps done and the hours left at this machine's rates
    (`progress.run_state`). Each task's run folders are read once."""
    with one_reading():
        return _report(spec)


def _report(spec: Spec) -> list[str]:
    todo = steps(spec)
    out = [f"experiment {spec.name} ({spec.path}) -> {spec.out}"]
    hours, unknown, done, waiting = 0.0, 0, 0, 0
    rows_left: dict[Path, list[str]] = {}  # task folder -> the routers of its rows not done
    for i, step in enumerate(todo, 1):
        if isinstance(step, Note):  # a note is no work; one that waits for a file is work to come
            out.append(f"[{i}/{len(todo)}] {step.label}")
            done, waiting = done + (step.waits is None), waiting + (step.waits is not None)
            continue
        if left := [
            r
            for r in rows_left.get(getattr(step, "folder", None), [])
            if r in _paired_routers(step)
        ]:
            # judged on the rows there so far it may read done, or ask for runs the finished
            # rows will not need: it runs after them, and is judged and priced then
            finished, text = False, f"after the rows ({len(left)} of its runs not done)"
            h, u = 0.0, 0
        else:
            text, h, u = status(step)
            finished = is_done(step)
        if isinstance(step, Command) and step.runs is not None and not finished:
            for folder, s in zip(step.runs.folders, run_states(step.runs), strict=True):
                if s.done < s.target:
                    rows_left.setdefault(folder.parent, []).append(folder.name.split("__")[0])
        if isinstance(step, Publish):  # as `run` decides it: after every step but those waiting
            pending = i - 1 - done - waiting
            if pending:
                finished, text = False, f"waits until every step is done ({pending} not done)"
            elif waiting and finished:
                text = f"done with the rows there so far ({waiting} step(s) above wait for a file)"
        done += finished
        hours, unknown = hours + h, unknown + u
        out.append(f"[{i}/{len(todo)}] {step.label}: {text}")
    left = (
        f"; ~{hours:.1f} h left at this machine's rates (others' where a step says)"
        if hours
        else ""
    )
    more = f" (+ {unknown} run{'s' * (unknown > 1)} with no rate yet)" if unknown else ""
    wait = f", {waiting} wait for a file a step makes" if waiting else ""
    out.append(f"{done} of {len(todo)} steps done{wait}{left}{more}")
    return out


def _paired_routers(step: Step) -> set[str]:
    """The routers whose rows a controls or verdicts step pairs (none for other steps)."""
    if isinstance(step, Controls):
        return set(step.pairs) | {r for rs in step.pairs.values() for r in rs}
    if isinstance(step, Verdicts):
        return set(step.routers) | set(step.against)
    return set()


def verdicts(spec: Spec) -> list[str]:
    """Markdown: per verdict step (each task), its matched pairs with the paired difference and
    its 95% interval (`harness.evaluation.verdict_table`), from the verdicts' JSON files."""
    out = [
        f"# {spec.name}: paired verdicts",
        "",
        "Each run against the nearest run of each router it is compared with (within 2 points "
        "of large-token share over the whole runs). Once compared, both shares and both "
        "qualities are over the examples both runs scored (shares more than 2 points apart "
        "there are marked); the difference is run minus other "
        "with its paired bootstrap interval, p the paired test's, Holm-adjusted over the "
        "table's comparisons.",
        "",
    ]
    for step in steps(spec):
        if isinstance(step, Verdicts):
            table = verdict_table(step)
            out += [f"## {step.label}", "", *(table or ["(no run of its routers yet)"]), ""]
    return out
