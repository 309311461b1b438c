"""The experiment spec format: a TOML file under experiments/ read into a `Spec`.

    spec = load("experiments/edition2.toml", sets=["models.threads=1"], n=4, tasks=["gsm8k"])

docs/experiments.md describes every section. Paths in a spec are relative to the folder the
command runs in (the repository root); `{name}` in any string is replaced by a variable (`fill`):
`out`, the `[vars]` table, and per task `task`, `n`, `split`, `trained_on`, `task_args` and the
task table's own keys (a string that is exactly one `{name}` takes the variable's value with its
type, so a list stays a list).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.evaluation.sweep import parse_targets

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

SECTIONS = (
    "experiment",
    "vars",
    "models",
    "tasks",
    "routers",
    "calibration",
    "rows",
    "controls",
    "anchors",
    "steps",
    "publish",
)
REQUIRED_FILES = (
    "path",
    "checkpoint",
)  # router arguments naming a file the router cannot run without
CONTROL_ROUNDS = 3  # a control's realized share differs from its p: a few rounds to match


@dataclass(frozen=True)
class Task:
    """A task of the experiment and the examples every row of it runs on."""

    name: str  # registered task name
    n: int | None  # the first n examples of the split (None: all of it)
    split: str  # the split rows run on (default test)
    task_args: tuple[str, ...]  # K=V task arguments
    max_new_tokens: int | None  # the answer budget (None: the task's own)
    trained_on: str  # whose trained checkpoints its rows use (default: its own)
    vars: Mapping  # the variables of its steps (its table's keys and the above)


@dataclass(frozen=True)
class Row:
    """Routers run as one `hybridbench sweep` into the task's folder."""

    routers: tuple[str, ...]  # router names, in the order they run
    shares: tuple[float, ...]  # target shares (--targets); () for the sweep's default
    args: Mapping  # router arguments every router of the row gets (beside [routers]' own)
    reuse_answers: bool  # query routers and the oracle take answers from small's and large's rows
    controls: str  # the control its routers are paired with at matched shares ('' for none)


@dataclass(frozen=True)
class Spec:
    """An experiment as read from its file, overrides applied."""

    path: Path  # the spec file
    name: str
    description: str
    out: Path  # the experiment's folder: one folder per task, calibration/, ...
    vars: Mapping  # every variable a step may name (tasks add theirs)
    models: Mapping  # options every command that loads the pair gets (--backend, --threads, ...)
    tasks: tuple[Task, ...]
    routers: Mapping[str, Mapping]  # router -> fixed arguments (`calibrate = true` marks those
    #                                 calibrated on calib before their rows)
    calibration: Mapping  # limit, answers, decode_answers, out (empty: no calibration)
    rows: tuple[Row, ...]
    control_rounds: int
    anchors: int  # examples of each speed anchor (0: none)
    steps: tuple[Mapping, ...]  # other commands, as written (`after_rows` ones after the rows)
    publish_to: str  # folder the edition is published into ('' for none)
    publish_readme: str = ""  # a README whose headline block gets the site's matrix ('' none)


def load(
    path: str | Path,
    sets: Sequence[str] = (),
    out: str | None = None,
    n: int | None = None,
    tasks: Sequence[str] = (),
) -> Spec:
    """The spec in `path`, with `out` (another folder: the spec's publish target is dropped),
    `sets` ("key.key=VALUE", the value read as TOML, else as text), `n` (every task's example
    count) and `tasks` (only those) applied."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"experiment spec {path} not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is not valid TOML: {e}") from None
    if out is not None:  # another folder is another experiment: not the spec's edition
        raw.setdefault("experiment", {})["out"] = out
        raw.pop("publish", None)
    for item in sets:
        _set(raw, item)
    if n is not None:
        for table in raw.get("tasks", {}).values():
            table["n"] = n
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise UserError(
            f"{path}: unknown section {', '.join(unknown)}; valid: {', '.join(SECTIONS)}"
        )
    head = raw.get("experiment", {})
    if not head.get("out"):
        raise UserError(f"{path}: [experiment] needs out = FOLDER")
    all_tasks = raw.get("tasks", {})
    chosen = [t for t in tasks if t not in all_tasks]
    if chosen:
        raise UserError(f"{path} has no task {', '.join(chosen)}; it has {', '.join(all_tasks)}")
    variables = {"out": head["out"], **raw.get("vars", {})}
    return Spec(
        path=path,
        name=head.get("name", path.stem),
        description=head.get("description", ""),
        out=Path(head["out"]),
        vars=variables,
        models=raw.get("models", {}),
        tasks=tuple(
            _task(name, t, variables) for name, t in all_tasks.items() if not tasks or name in tasks
        ),
        routers=raw.get("routers", {}),
        calibration=raw.get("calibration", {}),
        rows=tuple(_row(r, path) for r in raw.get("rows", [])),
        control_rounds=int(raw.get("controls", {}).get("rounds", CONTROL_ROUNDS)),
        anchors=int(raw.get("anchors", {}).get("n", 0)),
        steps=tuple(raw.get("steps", [])),
        publish_to=raw.get("publish", {}).get("to", ""),
        publish_readme=raw.get("publish", {}).get("readme", ""),
    )


def _set(raw: dict, item: str) -> None:
    """Apply one `--set key.key=VALUE` to the raw spec; a number in the path indexes a list."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise UserError(f"--set {item!r} is not of the form KEY.KEY=VALUE")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    *parents, last = key.split(".")
    node = raw
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _task(name: str, table: Mapping, variables: Mapping) -> Task:
    n = table.get("n")
    task = Task(
        name=name,
        n=None if n is None else int(n),
        split=table.get("split", "test"),
        task_args=tuple(table.get("task_args", ())),
        max_new_tokens=table.get("max_new_tokens"),
        trained_on=table.get("trained_on", name),
        vars={},
    )
    own = {
        "task": name,
        "n": task.n,
        "split": task.split,
        "trained_on": task.trained_on,
        "task_args": list(task.task_args),
    }
    return Task(**{**task.__dict__, "vars": {**variables, **table, **own}})


def _row(table: Mapping, path: Path) -> Row:
    if not table.get("routers"):
        raise UserError(f"{path}: a [[rows]] entry needs routers = [...]")
    shares = table.get("shares", ())
    if shares:
        parse_targets(",".join(str(s) for s in shares))  # shares in [0, 1], or one clear line
    return Row(
        routers=tuple(table["routers"]),
        shares=tuple(float(s) for s in shares),
        args=table.get("args", {}),
        reuse_answers=bool(table.get("reuse_answers", False)),
        controls=table.get("controls", ""),
    )


def fill(value, variables: Mapping):
    """`value` with each `{name}` replaced by its variable (see the module docstring)."""
    if isinstance(value, str):
        whole = re.fullmatch(r"\{(\w+)\}", value)
        if whole:
            return _var(whole.group(1), variables)
        return re.sub(r"\{(\w+)\}", lambda m: str(_var(m.group(1), variables)), value)
    if isinstance(value, list | tuple):
        return [fill(v, variables) for v in value]
    if isinstance(value, Mapping):
        return {k: fill(v, variables) for k, v in value.items()}
    return value


def _var(name: str, variables: Mapping):
    if name not in variables:
        raise UserError(f"unknown variable {{{name}}}; known here: {', '.join(sorted(variables))}")
    return variables[name]


def options(table: Mapping) -> list[str]:
    """{'max_new_tokens': 48, 'task_arg': ['a=1'], 'quiet': True} -> ['--max-new-tokens', '48',
    '--task-arg', 'a=1', '--quiet']: a list repeats the option, False or None leaves it out."""
    argv = []
    for key, value in table.items():
        flag = "--" + key.replace("_", "-")
        for v in value if isinstance(value, list | tuple) else [value]:
            if v is True:
                argv.append(flag)
            elif v is not False and v is not None:
                argv += [flag, text(v)]
    return argv


def text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def absent_files(spec: Spec, v: Mapping) -> dict[str, str]:
    """{router of the rows: the first file its arguments name that is not there yet (its
    checkpoint)}: such a router is left out of its rows, and of the steps that pair rows, until a
    step makes the file."""
    out = {}
    in_rows = {r for row in spec.rows for r in row.routers}
    for router, table in spec.routers.items():
        if router not in in_rows:
            continue
        args = fill(table, v)
        missing = [args[k] for k in REQUIRED_FILES if k in args and not Path(args[k]).is_file()]
        if missing:
            out[router] = str(missing[0])
    return out
