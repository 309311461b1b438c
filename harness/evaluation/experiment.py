"""Experiments: a spec (experiments/*.toml, read by harness/evaluation/experiment_spec.py)
expanded into the steps that run it.

    hybridbench experiment plan experiments/edition2.toml     # the command lines; nothing runs
    hybridbench experiment run experiments/edition2.toml --lock /tmp/hybridbench-heavy.lock
    hybridbench experiment status experiments/edition2.toml   # per step: done, examples, hours

A spec names its output folder, the pair and backend options, its tasks with their example
counts, and what to run on them: calibrations, rows (routers at shares, answers reused), matched
controls, speed anchors, other commands (training, reruns), paired verdicts and where the edition
is published.
Each step is a `hybridbench` command line (`plan` prints them) or a decision taken from the files
when the step is reached (which controls, which runs a verdict pairs, whether this machine needs a
speed anchor). Every step skips what its folder already holds (harness/evaluation/progress.py),
so running the same spec again resumes it (harness/evaluation/experiment_run.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.run_folder import RunFolder
from harness.errors import UserError
from harness.evaluation.experiment_spec import (
    REQUIRED_FILES,
    Row,
    Spec,
    Task,
    absent_files,
    fill,
    load,
    options,
    text,
)
from harness.evaluation.sweep import DEFAULT_TARGETS, parse_targets, router_settings, setting_name

__all__ = [
    "Anchor",
    "Command",
    "Controls",
    "Copy",
    "Note",
    "Publish",
    "Runs",
    "Select",
    "Spec",
    "Step",
    "Verdicts",
    "load",
    "published",
    "steps",
]

# --- steps --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runs:
    """Run folders a step fills and the examples each must hold."""

    folders: tuple[Path, ...]
    task: str
    task_args: tuple[str, ...]
    split: str
    limit: int | None  # --limit (the split's size caps it)
    published: Path | None = None  # the task's folder in the published edition: a run there
    #                                counts as done, and its copy is restored to resume from


@dataclass(frozen=True)
class Command:
    """A `hybridbench` command line, done when its run folders hold their examples, or when its
    `done` file exists (with `done_stat` in its checkpoint's stats, or `done_lines` lines); a
    command with neither runs every time (it resumes itself)."""

    label: str
    argv: tuple[str, ...]  # without the program name
    runs: Runs | None = None
    done: Path | None = None
    done_stat: str = ""
    done_lines: int = 0
    heavy: bool = True  # loads models: holds the heavy lock while it runs
    progress: Path | None = None  # a file with one line per unit of work done (status counts)


@dataclass(frozen=True)
class Anchor:
    """Large-only on a task's first n examples, on a machine that decoded less of large's row
    (the report divides each row's throughput by large-only's on the machine the row ran on)."""

    label: str
    task_folder: Path
    n: int
    argv: tuple[str, ...]  # the run command line; --out TASK/anchors/MACHINE_ID is added
    published: Path | None = None  # as Runs.published


@dataclass(frozen=True)
class Controls:
    """The matched controls a task's folder still needs (harness/evaluation/controls.py), run a
    few rounds: each round's runs realize shares the next round aims from. With another `setting`
    than p, the controls are other routers (entropy at a matched share), each run aimed by that
    argument at the share of a paired row none of its runs matches (progress.aimed)."""

    label: str
    folder: Path
    pairs: Mapping[str, tuple[str, ...]]  # control -> the routers paired with it
    argv: Mapping[str, tuple[str, ...]]  # control -> its sweep command line, less its setting
    rounds: int
    examples: Runs  # the examples each control run must hold (its folders are the runs')
    setting: str = "p"  # the router argument a control run is aimed by

    @property
    def published(self) -> Path | None:  # as Runs.published
        return self.examples.published

    def command(self, control: str, value: float) -> tuple[str, ...]:
        return (*self.argv[control], "--router-arg", f"{control}:{self.setting}={value}")


@dataclass(frozen=True)
class Verdicts:
    """`hybridbench compare` of each run of `routers` in a task's folder with the run of each
    router of `against` nearest its share, where that is within 2 points (a matched pair): the
    paired verdict's JSON written into `to` as RUN--vs--OTHER.json. Reads files only."""

    label: str
    folder: Path
    routers: tuple[str, ...]
    against: tuple[str, ...]
    to: Path
    published: Path | None = None  # as Runs.published

    def verdict(self, run: str, other: str) -> Path:
        return self.to / f"{run}--vs--{other}.json"

    def command(self, run: str, other: str) -> tuple[str, ...]:
        """The run of `against` first: the verdict's differences are run minus other."""
        return (
            "compare",
            str(self.folder / other),
            str(self.folder / run),
            "--json",
            str(self.verdict(run, other)),
        )


@dataclass(frozen=True)
class Select:
    """Copy `files` of the candidate folder with the largest metric into `to`."""

    label: str
    candidates: str  # glob of candidate folders
    metric: str  # FILE:key.key.key, a JSON number in each candidate
    files: tuple[str, ...]
    to: Path


@dataclass(frozen=True)
class Copy:
    """Copy files into a folder (rows measured elsewhere, e.g. on a GPU machine)."""

    label: str
    files: tuple[Path, ...]
    to: Path
    published: Path | None = None  # the same folder in the published edition: copies there count


@dataclass(frozen=True)
class Publish:
    """`hybridbench publish`, once every other step is done."""

    label: str
    argv: tuple[str, ...]
    src: Path
    dest: Path
    tasks: tuple[str, ...]


@dataclass(frozen=True)
class Note:
    """Something a reader should know about the plan (a row left out and why); with `waits`, a
    step that runs once that file is there."""

    label: str
    waits: Path | None = None


Step = Command | Anchor | Controls | Verdicts | Select | Copy | Publish | Note


# --- expanding a spec into steps ---------------------------------------------------------------


def steps(spec: Spec) -> list[Step]:
    """The experiment's steps in the order they run: the `[[steps]]` before the rows, per task its
    device rows, calibrations, rows, speed anchor and controls, the `after_rows` steps, publishing."""
    out: list[Step] = list(_generic(spec, after_rows=False))
    for task in spec.tasks:
        out += _task_steps(spec, task)
    out += _generic(spec, after_rows=True)
    if spec.publish_to and spec.rows:
        names = tuple(t.name for t in spec.tasks)
        dest = Path(spec.publish_to)
        argv = ("publish", str(spec.out), str(dest), "--tasks", ",".join(names))
        argv += ("--readme", spec.publish_readme) if spec.publish_readme else ()
        out.append(Publish(f"publish {', '.join(names)} into {dest}", argv, spec.out, dest, names))
    return out


def _task_opts(task: Task, limit: int | None) -> list[str]:
    argv = ["--task", task.name]
    for kv in task.task_args:
        argv += ["--task-arg", kv]
    argv += ["--split", task.split] + (["--limit", str(limit)] if limit is not None else [])
    return argv + (["--max-new-tokens", str(task.max_new_tokens)] if task.max_new_tokens else [])


def published(spec: Spec, task: Task) -> Path | None:
    """The task's folder in the published edition, when the spec publishes one."""
    return Path(spec.publish_to) / task.name if spec.publish_to else None


def task_examples(spec: Spec, task: Task, folders: tuple[Path, ...] = ()) -> Runs:
    """`folders`, each to hold the task's examples of the spec (its split, its n)."""
    return Runs(folders, task.name, task.task_args, task.split, task.n, published(spec, task))


def _task_steps(spec: Spec, task: Task) -> list[Step]:
    folder, v, pub = spec.out / task.name, task.vars, published(spec, task)
    models = options(fill(spec.models, v))
    out: list[Step] = []
    if v.get("device"):
        files = tuple(Path(f) for f in fill(v["device"], v))
        out.append(
            Copy(
                f"{task.name}: rows measured elsewhere, into device/",
                files,
                folder / "device",
                pub / "device" if pub else None,
            )
        )
    fixed = {
        router: {k: a for k, a in fill(table, v).items() if k != "calibrate"}
        for router, table in spec.routers.items()
    }
    left_out = absent_files(spec, v)  # routers of the rows whose checkpoint is not there yet
    out += [
        Note(f"{task.name}: {r} left out of its rows ({f} not found)") for r, f in left_out.items()
    ]
    in_rows = {r for row in spec.rows for r in row.routers} - set(left_out)
    calibrated = [r for r, t in spec.routers.items() if t.get("calibrate") and r in in_rows]
    if calibrated:
        out += _calibration(spec, task, calibrated, fixed, models)
    for row in spec.rows:
        routers = [r for r in row.routers if r not in left_out]
        if routers:
            out.append(_sweep(spec, task, row, routers, fixed, models))
    if spec.anchors:
        argv = ("run", "--router", "large", *_task_opts(task, spec.anchors), *models)
        out.append(
            Anchor(
                f"{task.name}: speed anchor, large-only on {spec.anchors} examples",
                folder,
                spec.anchors,
                argv,
                pub,
            )
        )
    pairs: dict[str, list[str]] = {}
    for row in spec.rows:
        if row.controls:
            paired = [r for r in row.routers if r != row.controls and r not in left_out]
            if paired:
                pairs.setdefault(row.controls, []).extend(paired)
    if pairs:
        reuse = {r for row in spec.rows if row.reuse_answers for r in row.routers}
        argv = {
            c: (
                "sweep",
                "--routers",
                c,
                *_task_opts(task, task.n),
                *models,
                *(_reuse(folder) if c in reuse else ()),
                "--out",
                str(folder),
            )
            for c in pairs
        }
        label = f"{task.name}: matched controls ({', '.join(pairs)})"
        out.append(
            Controls(
                label,
                folder,
                {c: tuple(rs) for c, rs in pairs.items()},
                argv,
                spec.control_rounds,
                task_examples(spec, task),
            )
        )
    return out


def _reuse(folder: Path) -> tuple[str, str]:
    return ("--reuse-answers", f"{folder / 'small__default'},{folder / 'large__default'}")


def _calibration(spec, task: Task, routers: list[str], fixed: dict, models: list[str]) -> list:
    cal = fill(spec.calibration, task.vars)
    if not cal.get("out"):
        raise UserError(f"{spec.path}: routers to calibrate, and no [calibration] out = FOLDER")
    if task.task_args:
        raise UserError(f"{spec.path}: {task.name} has task arguments; calibrate takes none")
    limit = cal.get("limit")
    own = {**fill(spec.models, task.vars), **cal.get("args", {})}  # calibrate's: args over models
    out: list[Step] = []
    answers = Path(cal["answers"]) if cal.get("answers") else None
    if answers is None or not RunFolder(answers).finished():
        if not cal.get("decode_answers"):
            raise UserError(f"{spec.path}: [calibration] needs decode_answers = FOLDER")
        answers = Path(cal["decode_answers"])
        calib = Task(**{**task.__dict__, "split": "calib"})
        argv = (
            "run",
            "--router",
            "small",
            *_task_opts(calib, limit),
            *models,
            "--out",
            str(answers),
        )
        runs = Runs((answers,), task.name, (), "calib", limit)
        out.append(Command(f"{task.name}: small's answers on calib", argv, runs))
    for router in routers:
        checkpoint = [fixed[router][k] for k in REQUIRED_FILES if k in fixed[router]]
        argv = [
            "calibrate",
            "--router",
            router,
            *(["--checkpoint", *checkpoint] if checkpoint else []),
        ]
        argv += ["--task", task.name] + (["--limit", str(limit)] if limit is not None else [])
        argv += ["--records", str(RunFolder(answers).records_path), *options(own)]
        if task.max_new_tokens:
            argv += ["--max-new-tokens", str(task.max_new_tokens)]
        target = Path(cal["out"]) / f"{router}.json"
        out.append(
            Command(f"{task.name}: calibrate {router}", (*argv, "--out", str(target)), done=target)
        )
        fixed[router] = {**fixed[router], "calibration": str(target)}
    return out


def _sweep(spec, task: Task, row: Row, routers: list[str], fixed: dict, models: list[str]):
    folder = spec.out / task.name
    argv = ["sweep", "--routers", ",".join(routers)]
    if row.shares:
        argv += ["--targets", ",".join(str(s) for s in row.shares)]
    targets = list(row.shares) or parse_targets(DEFAULT_TARGETS)
    names = []
    for router in routers:
        args = {**fixed.get(router, {}), **fill(row.args, task.vars)}
        argv += [x for k, a in args.items() for x in ("--router-arg", f"{router}:{k}={text(a)}")]
        settings = router_settings(router, targets, args)
        pinned = {k: a for k, a in args.items() if any(k in s for s in settings)}
        names += [f"{router}__{setting_name(s)}" for s in ([pinned] if pinned else settings)]
    argv += [*_task_opts(task, task.n), *models]
    argv += [*(_reuse(folder) if row.reuse_answers else ()), "--out", str(folder)]
    runs = task_examples(spec, task, tuple(folder / n for n in dict.fromkeys(names)))
    shares = f" at {', '.join(str(s) for s in row.shares)}" if row.shares else ""
    return Command(f"{task.name}: rows {', '.join(routers)}{shares}", tuple(argv), runs)


def _generic(spec: Spec, after_rows: bool) -> list[Step]:
    """The `[[steps]]` tables: per task when they name {task} (or list `tasks`, or are controls
    or verdicts), once per combination of their `matrix` values."""
    out: list[Step] = []
    for i, table in enumerate(spec.steps):
        if bool(table.get("after_rows")) != after_rows:
            continue
        per_task = "tasks" in table or "{task}" in repr(table) or bool(PAIRED & set(table))
        chosen = [t for t in spec.tasks if t.name in table.get("tasks", [t.name])]
        for task in chosen if per_task else [None]:
            v = task.vars if task else spec.vars
            matrix = fill(table.get("matrix", {}), v)
            for combo in itertools.product(*matrix.values()):
                here = {**v, **dict(zip(matrix, combo, strict=True))}
                out.append(_generic_step(spec, table, here, i, task))
    return out


PAIRED = {"controls", "compare"}  # step kinds that pair runs of a task's folder


def _paired_step(spec: Spec, table: Mapping, v: Mapping, label: str, task: Task) -> Step:
    """A `controls = [...]` step (runs of those routers aimed at the shares of `routers`' rows)
    or a `compare = [...]` one (each row of `routers` against the nearest run of each)."""
    folder, pub = spec.out / task.name, published(spec, task)
    routers = tuple(fill(table.get("routers", []), v))
    if not routers or ("compare" in table and not table.get("to")):
        raise UserError(
            f"{spec.path}: a step with controls = needs routers = [...], one with "
            "compare = needs routers = [...] and to = FOLDER"
        )
    absent = absent_files(spec, v)
    if all(r in absent for r in routers):  # a router with no file has no rows to pair yet
        file = absent[routers[0]]
        return Note(f"{label}: waits for {file}", Path(file))
    routers = tuple(r for r in routers if r not in absent)
    if "compare" in table:
        against = tuple(r for r in fill(table["compare"], v) if r not in absent)
        return Verdicts(label, folder, routers, against, Path(fill(table["to"], v)), pub)
    models = options(fill(spec.models, v))
    argv = {}
    for control in fill(table["controls"], v):
        own = fill(spec.routers.get(control, {}), v)
        args = {k: a for k, a in own.items() if k != "calibrate"}
        if own.get("calibrate") and spec.calibration.get("out"):  # calibrated as in its rows
            args.setdefault(
                "calibration", str(Path(fill(spec.calibration["out"], v)) / f"{control}.json")
            )
        fixed = [x for k, a in args.items() for x in ("--router-arg", f"{control}:{k}={text(a)}")]
        argv[control] = (
            "sweep",
            "--routers",
            control,
            *fixed,
            *_task_opts(task, task.n),
            *models,
            "--out",
            str(folder),
        )
    rounds = int(table.get("rounds", spec.control_rounds))
    setting = table.get("setting", "p")
    examples = task_examples(spec, task)
    return Controls(label, folder, {c: routers for c in argv}, argv, rounds, examples, setting)


def _generic_step(spec: Spec, table: Mapping, v: Mapping, i: int, task: Task | None) -> Step:
    name = fill(table.get("name", table.get("command", f"step {i + 1}")), v)
    where = ", ".join(f"{k}={v[k]}" for k in table.get("matrix", {}))
    label = (f"{v['task']}: " if "task" in v else "") + name + (f" ({where})" if where else "")
    if task is not None and PAIRED & set(table):
        return _paired_step(spec, table, v, label, task)
    if "select" in table:
        return Select(
            label,
            fill(table["select"], v),
            fill(table["by"], v),
            tuple(fill(table.get("copy", []), v)),
            Path(fill(table["to"], v)),
        )
    if "copy" in table:
        return Copy(
            label, tuple(Path(f) for f in fill(table["copy"], v)), Path(fill(table["to"], v))
        )
    if "command" not in table:
        raise UserError(
            f"{spec.path}: step {i + 1} needs command =, select =, copy =, controls = or compare ="
        )
    args = fill(table.get("args", {}), v)
    models = fill(spec.models, v)
    keep = table.get("models", True)
    if keep is not True:
        models = {k: m for k, m in models.items() if keep and k in keep}
    models = {k: m for k, m in models.items() if k not in args}
    argv = (
        table["command"],
        *map(str, fill(table.get("positional", []), v)),
        *options(args),
        *options(models),
    )
    out = Path(args.get("out", spec.out))
    runs = None
    if table["command"] == "run" and "task" in args:
        limit = args.get("limit")
        runs = Runs(
            (out,),
            args["task"],
            tuple(args.get("task_arg", ()) or ()),
            args.get("split", "test"),
            None if limit is None else int(limit),
        )
    done = out / fill(table["done"], v) if table.get("done") else None
    lines = int(fill(table.get("done_lines", 0), v))
    counted = out / fill(table["progress"], v) if table.get("progress") else None
    return Command(
        label,
        argv,
        runs,
        done,
        table.get("done_stat", ""),
        lines,
        table.get("heavy", True),
        counted,
    )
