"""`hybridbench sweep`: routers at each of their settings on one task, one run per (router, setting).

    hybridbench sweep --task gsm8k --routers small,large,random,entropy,oracle \\
        --targets 0.1,0.2,0.3,0.5 --limit 50 --out runs/sweep-gsm8k --threads 2
    hybridbench report runs/sweep-gsm8k

Each (router, setting) is one `hybridbench run` (harness/evaluation/runner.py, not a copy of it) into
OUT/<router>__<setting>/, so the sweep folder is a results folder that `hybridbench report` reads.
The model, decode and split options are those of `run` and are passed on unchanged.

Settings. A router class may define a classmethod `sweep_settings(targets: list[float], fixed:
dict) -> list[dict]`, the router arguments of each setting given the router's fixed arguments
(`random`: p = each target; `entropy` and `confidence`: each target share when a calibration file
is passed (`--router-arg entropy:calibration=FILE`), else a fixed threshold grid, see
routers/baselines.py). A router without it (small, large, oracle, speculative) runs once, its
setting named by its fixed arguments (`default` when it has none: speculative__default,
speculative__adaptive=true). `--router-arg ROUTER:K=V` adds a fixed argument to
every setting of ROUTER (a checkpoint, a calibration file); one that names a swept argument
(`entropy:threshold=1.0`) pins it, and that router runs once, at that value.

Resumable. OUT/sweep.json keeps each run's `run` command line and status. A run whose identical
command line finished before (and left its summary) is skipped; any other run is handed to
the runner, which itself resumes per example. A failed run is listed at the end and the sweep exits
with status 1; the other runs still complete.

Executors.
  local (default)  runs one after another in this process (--jobs 1), or in a pool of --jobs
                   processes (their output goes to OUT/logs/<run>.log).
  ray              each run is one Ray task on an existing cluster: `--ray-address ADDR`, else the
                   RAY_ADDRESS variable or a cluster started on this machine with `ray start`.
                   Workers must see the same filesystem as this machine (the output folder and
                   model folders, passed as absolute paths) and have hybridbench installed; each
                   task reserves --ray-cpus CPUs and writes its output to OUT/logs/<run>.log.
                   Ray's own settings apply: a cluster with token authentication needs
                   RAY_AUTH_MODE=token and its token (~/.ray/auth_token or RAY_AUTH_TOKEN).
                   Ray is imported only when this executor is chosen.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.backends.model_spec import ModelSpec
from harness.core.run_folder import RunFolder, folder_lock
from harness.errors import UserError
from harness.evaluation.spec import DECODE_FIELDS, MODEL_FIELDS

STATE = "sweep.json"  # the sweep's own record of runs, beside the run folders
DEFAULT_TARGETS = "0.1,0.2,0.3,0.5,0.7"


@dataclass(frozen=True)
class SweepSpec:
    """One `hybridbench sweep`: routers at each of their settings on one task, into one folder.

    Parsed once by the command line (`harness.cli.sweep.spec_of`); each row's `run` command line is
    made from it (`plan_rows`) and recorded in the folder's sweep.json."""

    task: str  # task name, import path or entry point
    routers: tuple[str, ...]  # router names, in the order they run
    out: str  # the sweep folder (created, or resumed)
    task_args: tuple[str, ...] = ()  # the task's arguments as given ("K=V"), passed on as written
    targets: tuple[float, ...] = tuple(map(float, DEFAULT_TARGETS.split(",")))  # shares in [0, 1]
    router_args: Mapping[str, Mapping] = field(default_factory=dict)  # router -> fixed arguments
    split: str = "test"  # train | calib | test | all
    split_seed: int = 0  # the hashed split's seed
    limit: int | None = None  # the split's first N examples (None: all)
    reuse_answers: str | None = None  # "SMALL_RUN,LARGE_RUN", for query routers and the oracle
    # decoding, passed on to every run
    max_new_tokens: int | None = None  # None: the task's own budget
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0
    models: ModelSpec = ModelSpec(batch="auto")  # the pair and its backends, passed on
    # executing
    executor: str = "local"  # local | ray
    jobs: int = 1  # local: runs at once
    ray_address: str | None = None  # ray: an existing cluster's address (None: auto)
    ray_cpus: float = 1  # ray: CPUs each run reserves

    def __post_init__(self):
        fixed = {r: dict(a) for r, a in self.router_args.items() if a}  # {} and absent are one
        object.__setattr__(self, "router_args", fixed)
        if self.jobs < 1:
            raise UserError(f"--jobs must be >= 1, got {self.jobs}")
        if self.ray_cpus <= 0:
            raise UserError(f"--ray-cpus must be > 0, got {self.ray_cpus}")

    def passed_on(self) -> list[str]:
        """The decode and model options every run gets, as `run` options (None ones left out;
        a model that is a path made absolute, for workers elsewhere)."""
        argv = []
        values = {k: getattr(self, k) for k in DECODE_FIELDS}
        values.update((k, getattr(self.models, k)) for k in MODEL_FIELDS)
        for name, value in values.items():
            if value is None:
                continue
            if name in ("small", "large") and Path(value).exists():
                value = Path(value).resolve()
            argv += [f"--{name.replace('_', '-')}", str(value)]
        return argv


@dataclass(frozen=True)
class Row:
    """One run of a sweep."""

    name: str  # run folder under OUT: "<router>__<setting>"
    router: str  # registered router name
    setting: dict  # the swept router arguments of this run ({} for a router without settings)
    argv: tuple[str, ...]  # the `hybridbench run ...` command line, without the program name


@dataclass(frozen=True)
class Outcome:
    """How one run ended."""

    name: str  # the job's name
    returncode: int  # 0 done; 1 examples failed or the run raised; 2 a user error; -1 skipped
    seconds: float  # wall time of the run (0 when skipped)
    error: str  # one line saying why it failed; '' when it did not


# Runs one `hybridbench run` command line (name, argv, log file or None) -> its Outcome; the
# command line provides it (`harness.cli.sweep.run_job`), so this module never parses a command.
RunJob = Callable[[str, tuple, str | None], Outcome]


def _report(outcomes: list[Outcome], out: Path) -> int:
    failed = [o for o in outcomes if o.returncode > 0]
    ran = sum(o.returncode == 0 for o in outcomes)
    skipped = sum(o.returncode == -1 for o in outcomes)
    print(
        f"sweep: {len(outcomes)} runs, {ran} ran, {skipped} skipped, {len(failed)} failed -> {out}"
    )
    for o in failed:
        log = out / "logs" / f"{o.name}.log"
        where = f" (log: {log})" if log.is_file() else ""
        print(f"  failed: {o.name}: {o.error}{where}", file=sys.stderr)
    return 1 if failed else 0


# --- planning: which runs, with which command lines ---------------------------------------------


def plan_rows(spec: SweepSpec, out: Path) -> list[Row]:
    """The sweep's runs in order, each with its `run` command line; user mistakes raise early."""
    from harness.evaluation.runner import reuse_mode
    from routers import get_router, parse_args
    from tasks import get_task

    # unknown task or argument: fail before any run
    get_task(spec.task, **parse_args(list(spec.task_args)))
    routers = list(spec.routers)
    if not routers:
        raise UserError("--routers is empty")
    targets = list(spec.targets)
    if stray := [r for r in spec.router_args if r not in routers]:
        raise UserError(f"--router-arg names {stray[0]!r}, not one of --routers")
    fixed = {r: dict(spec.router_args.get(r, {})) for r in routers}
    passed_on = spec.passed_on()
    jobs, names = [], {}  # run folder -> the router arguments decoded into it
    for router in routers:
        settings = router_settings(router, targets, fixed[router])
        pinned = {k: v for k, v in fixed[router].items() if any(k in s for s in settings)}
        if pinned:  # --router-arg names a swept argument: that router runs once, at that value
            settings = [pinned]
        for setting in settings:
            router_args = {**fixed[router], **setting}
            # a wrong argument fails here, not in run 7 of 20
            reuses = reuse_mode(get_router(router, router_args))
            name = f"{router}__{setting_name(setting)}"
            if name in names:  # a repeated target gives the same run; two runs never one folder
                if names[name] != router_args:
                    raise UserError(
                        f"{router}: settings {names[name]} and {router_args} would share the run "
                        f"folder {name}; give settings that differ in their names"
                    )
                continue
            names[name] = router_args
            argv = run_argv(spec, router, router_args, out / name, passed_on)
            if reuses and spec.reuse_answers:
                folders = [str(Path(f.strip()).resolve()) for f in spec.reuse_answers.split(",")]
                argv += ("--reuse-answers", ",".join(folders))
            jobs.append(Row(name, router, setting, argv))
    return jobs


def parse_routers(text: str) -> tuple[str, ...]:
    """'small, random,small' -> ('small', 'random'): each router once, in order."""
    return tuple(dict.fromkeys(r.strip() for r in text.split(",") if r.strip()))


def parse_targets(text: str) -> list[float]:
    """'0.1, 0.3' -> [0.1, 0.3]; each a share in [0, 1]."""
    try:
        targets = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"--targets must be comma-separated numbers, got {text!r}") from None
    bad = [t for t in targets if not 0.0 <= t <= 1.0]
    if bad or not targets:
        raise UserError(f"--targets must be numbers in [0, 1], got {text!r}")
    return targets


def fixed_router_args(pairs: list[str], routers: list[str]) -> dict[str, dict]:
    """['reward:checkpoint=x.pt'] -> {'reward': {'checkpoint': 'x.pt'}, other routers: {}}."""
    from routers import parse_args

    out: dict[str, dict] = {r: {} for r in routers}
    for pair in pairs:
        router, sep, kv = pair.partition(":")
        named = [r for r in routers if pair.startswith(f"{r}:")]
        if named:  # the longest: a router named by import path holds a colon ("pkg.m:Cls:k=v")
            router = max(named, key=len)
            kv = pair[len(router) + 1 :]
        if not sep or "=" not in kv:
            raise UserError(f"--router-arg {pair!r} is not of the form ROUTER:K=V")
        if router not in out:
            raise UserError(f"--router-arg {pair!r} names {router!r}, not one of --routers")
        out[router].update(parse_args([kv]))
    return out


def router_settings(router: str, targets: list[float], fixed: dict | None = None) -> list[dict]:
    """The router arguments of each setting: the class's `sweep_settings(targets, fixed)`, else
    one setting, its fixed arguments (so `speculative` and `speculative:adaptive=true` run into
    two folders, speculative__default and speculative__adaptive=true)."""
    from routers import router_class

    sweep_settings = getattr(router_class(router), "sweep_settings", None)
    if sweep_settings is None:
        return [dict(fixed or {})]
    settings = [dict(s) for s in sweep_settings(list(targets), dict(fixed or {}))]
    if not settings:
        raise UserError(f"router {router!r} has no sweep settings for targets {targets}")
    return settings


def setting_name(setting: dict) -> str:
    """{'p': 0.1} -> 'p=0.1'; {} -> 'default'; characters unsafe in a folder name become '-'."""
    if not setting:
        return "default"
    text = "_".join(f"{k}={_arg_text(v)}" for k, v in sorted(setting.items()))
    return re.sub(r"[^A-Za-z0-9_.=+-]", "-", text)


def _arg_text(value) -> str:
    """A router argument as `routers.parse_args` reads it back to the same value."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


def run_argv(
    spec: SweepSpec, router: str, router_args: dict, out: Path, passed_on: list[str]
) -> tuple[str, ...]:
    """The `hybridbench run` command line of one run (paths absolute, for workers elsewhere)."""
    argv = ["run", "--task", spec.task, "--router", router, "--out", str(out)]
    argv += ["--split", spec.split, "--split-seed", str(spec.split_seed)]
    for kv in spec.task_args:
        argv += ["--task-arg", kv]
    for k, v in router_args.items():
        argv += ["--router-arg", f"{k}={_arg_text(v)}"]
    if spec.limit is not None:
        argv += ["--limit", str(spec.limit)]
    return tuple(argv + passed_on)


# --- resuming ----------------------------------------------------------------------------------


def _read_state(out: Path) -> dict:
    path = out / STATE
    if not path.is_file():
        return {"runs": {}}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {"runs": {}}  # unreadable: every run goes to the runner, which resumes
    return state if isinstance(state.get("runs"), dict) else {"runs": {}}


def _write_state(out: Path, state: dict) -> None:
    tmp = out / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, out / STATE)


def _finished(state: dict, job: Row, out: Path) -> bool:
    """A run is finished when the same command line ended with status 0 and left its summary."""
    old = state["runs"].get(job.name) or {}
    return (
        old.get("returncode") == 0
        and old.get("argv") == list(job.argv)
        and RunFolder(out / job.name).finished()
    )


# --- executing ---------------------------------------------------------------------------------


def _log(out: Path, job: Row) -> str:
    return str(out / "logs" / f"{job.name}.log")


def execute_local(
    jobs: list[Row],
    out: Path,
    n_procs: int,
    run_job: RunJob,
    started: Callable[[Row], None] = lambda job: None,
) -> Iterator[Outcome]:
    """Runs one after another in this process, or `n_procs` at a time in a process pool
    (`run_job` must then be a module-level function, so that it pickles by name)."""
    if n_procs == 1:
        for job in jobs:
            started(job)
            yield run_job(job.name, job.argv)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("spawn")  # no forked torch state in the workers
    with ProcessPoolExecutor(n_procs, mp_context=ctx) as pool:
        futures = {pool.submit(run_job, j.name, j.argv, _log(out, j)): j for j in jobs}
        for fut in as_completed(futures):
            try:
                yield fut.result()
            except Exception as e:  # noqa: BLE001 - a worker process died
                yield Outcome(futures[fut].name, 1, 0.0, f"{type(e).__name__}: {e}")


def execute_ray(
    jobs: list[Row], out: Path, address: str | None, cpus: float, run_job: RunJob
) -> Iterator[Outcome]:
    """Each run one Ray task on the cluster at `address`; outcomes in the order they finish."""
    if not jobs:
        return
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray needs Ray: pip install 'hybridbench[ray]'") from None
    try:
        ray.init(address=address or "auto", log_to_driver=False, logging_level="WARNING")
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UserError(f"cannot reach a Ray cluster at {address or 'auto'}: {e}") from None
    try:
        # max_calls=1: a fresh worker process per run, so no run inherits another's models.
        task = ray.remote(num_cpus=cpus, max_calls=1)(run_job)
        pending = {task.remote(j.name, j.argv, _log(out, j)): j for j in jobs}
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ref)
            try:
                yield ray.get(ref)
            except ray.exceptions.RayError as e:  # the worker died or the task could not run
                yield Outcome(job.name, 1, 0.0, f"{type(e).__name__}: {str(e).splitlines()[0]}")
    finally:
        ray.shutdown()  # disconnects this driver; the cluster keeps running


def sweep(spec: SweepSpec, run_job: RunJob) -> int:
    """Plan the sweep's runs, skip those finished before, run the rest with `run_job` (the
    command line's runner of one `hybridbench run` command line) and report."""
    out = Path(spec.out).resolve()
    jobs = plan_rows(spec, out)
    with folder_lock(out):  # one sweep per folder (each run holds its own folder's lock too)
        return _sweep(spec, jobs, out, run_job)


def _sweep(spec: SweepSpec, jobs: list[Row], out: Path, run_job: RunJob) -> int:
    state = _read_state(out)
    todo = [j for j in jobs if not _finished(state, j, out)]
    outcomes = [Outcome(j.name, -1, 0.0, "") for j in jobs if j not in todo]
    for i, o in enumerate(outcomes, 1):
        print(f"[{i}/{len(jobs)}] {o.name}: skipped (finished before)", flush=True)

    def started(job: Row) -> None:
        print(f"[{len(outcomes) + 1}/{len(jobs)}] {job.name}: running", flush=True)

    if todo and (spec.executor == "ray" or spec.jobs > 1):
        print(f"running {len(todo)} runs on {spec.executor}; logs in {out / 'logs'}", flush=True)
    if spec.executor == "ray":
        results = execute_ray(todo, out, spec.ray_address, spec.ray_cpus, run_job)
    else:
        results = execute_local(todo, out, spec.jobs, run_job, started)
    argv_of = {j.name: list(j.argv) for j in todo}
    for o in results:
        outcomes.append(o)
        state["runs"][o.name] = {"argv": argv_of[o.name], **asdict(o)}
        _write_state(out, state)
        status = "done" if o.returncode == 0 else f"FAILED (status {o.returncode}): {o.error}"
        print(f"[{len(outcomes)}/{len(jobs)}] {o.name}: {status} ({o.seconds:.1f} s)", flush=True)
    return _report(outcomes, out)
