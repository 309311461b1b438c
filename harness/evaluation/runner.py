"""`hybridbench run`: one router on one task split, crash-safe and resumable.

    hybridbench run --task gsm8k --router oracle --limit 5 --out runs/gsm8k-oracle
    evaluate(RunSpec(task="gsm8k", router="oracle", limit=5, out="runs/gsm8k-oracle"))

The run folder (`harness.core.run_folder`, its one owner) holds the manifest: what ran (task,
split, router and its arguments, decode settings, models (source, dtype, device, sizes, sha256),
package versions, git commit, machine, the router's and task's classes with the package versions
that provide them (`plugins`; a resume whose plugin changed version says so on stderr), and one
entry per invocation in `sessions`: batch size (--batch), examples, emitted tokens, wall
seconds (the run's throughput) and CPU seconds (what it cost)); the records, one
`ExampleRecord` per example, appended and fsync'ed as each is scored; the summary (`harness.metrics.quality.summarize`), written at the end.
One process writes a folder at a time: a second run into it ends at once, naming the first.
Re-running the same command resumes: scored examples are skipped, failed ones (an `error` field)
are retried, and a half-written last line from a crash is dropped. Timing fields of the summary
naturally differ between runs; every other field equals an uninterrupted run's (with --batch > 1
on a quantized llama.cpp model, up to near-tie tokens: a resume regroups which generations share
a batched call, and llama.cpp's multi-row kernels round differently; README "Batched evaluation").
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from harness.backends.engine import backend_kinds, decode_config, engine_from_args
from harness.core.records import ExampleRecord
from harness.core.run_folder import RunFolder
from harness.errors import UserError
from harness.evaluation import drain
from harness.evaluation.spec import RunSpec, Summary


def decode_examples(
    engine,
    router,
    task,
    examples,
    cfg,
    folder: RunFolder,
    split: str,
    done: dict,
    session=None,
    reuse: dict | None = None,
    on_progress=None,
) -> None:
    """Decode `engine.batch` examples at a time (`Engine.generate_many`), score and append each
    as it finishes; a failure is recorded (and retried on resume). `session` (a dict) gets the
    examples, emitted tokens and wall seconds of this call, brought up to date after every
    example, when `on_progress()` is called (the runner saves the manifest then: a process
    killed outright loses at most the example in flight), and at the end, also on an interrupt.
    `reuse` (`reused_runs`): a query router's answers are taken from those runs, the oracle's
    replayed along large's (`harness.evaluation.replay`); the session's wall seconds then count each reused
    example's modeled seconds (`reused_seconds`) instead of the time spent reusing it."""
    from tqdm import tqdm

    from harness.core.scheduler import Job

    session = session if session is not None else {}
    session.update(examples=0, tokens=0, wall_s=0.0)
    if reuse:
        session["reused"] = {"runs": reuse["runs"], "examples": 0, "seconds": 0.0}
        reuse["spent"] = 0.0

    def make_job(ex):
        ids = engine.encode(ex.messages)
        return Job(ex, ids, cfg, answers=reused_answers(reuse, ex.id, ids) if reuse else None)

    # a drain (harness.evaluation.drain) takes no new example: those in flight finish
    jobs = (make_job(ex) for ex in itertools.takewhile(lambda _: not drain.asked(), examples))
    if reuse and reuse["mode"] == "oracle":
        from harness.evaluation.replay import oracle_generations

        generations = oracle_generations(engine, router, jobs, reuse)
    else:
        generations = engine.generate_many(router, jobs)
    bar = tqdm(total=len(examples), desc=f"{task.name}/{router.name}", unit="ex", file=sys.stderr)
    from harness.backends.contention import Contention

    busy = Contention()  # the CPU other processes take meanwhile (`_clock`)
    start = time.perf_counter()
    cpu0 = _cpu_seconds()
    try:
        with folder.appender() as append:
            for job, gen in generations:
                ex, error, scores = job.key, "", {}
                if isinstance(gen, UserError | KeyboardInterrupt):
                    raise gen
                if isinstance(gen, Exception):  # recorded as a failed example, retried on resume
                    error, gen = f"{type(gen).__name__}: {gen}", None
                else:
                    t0 = time.perf_counter()
                    try:
                        scores = task.score(ex, gen.text)
                    except UserError:  # a plugin task's fault (tasks.base.GuardedTask): stop
                        raise
                    except Exception as e:  # noqa: BLE001 - as above
                        error = f"{type(e).__name__}: {e}"
                    scored_s = time.perf_counter() - t0
                rec = ExampleRecord(
                    example_id=ex.id,
                    split=split,
                    completion=gen.text if gen else "",
                    scores=scores,
                    generation=gen.to_json() if gen else {},
                    seconds=gen.seconds + scored_s if gen else 0.0,
                    error=error,
                )
                append(rec)
                if not error:
                    done[ex.id] = rec.to_json()
                    session["examples"] += 1
                    session["tokens"] += len(gen.token_ids)
                    seconds = reused_seconds(reuse, job, gen) if reuse else None
                    if seconds is not None:
                        session["reused"]["examples"] += 1
                        session["reused"]["seconds"] += seconds
                bar.update()
                bar.set_postfix_str(_progress(done.values(), task.metric))
                _clock(session, start, reuse, busy, cpu0)
                if on_progress is not None:
                    on_progress()
    finally:
        _clock(session, start, reuse, busy, cpu0)
        bar.close()


def _cpu_seconds() -> float:
    """CPU seconds this process (every thread: llama.cpp's and torch's) and its finished children
    (the sandboxed tests) have used so far."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _clock(session: dict, start: float, reuse: dict | None, busy=None, cpu0=None) -> None:
    """The session's wall seconds so far, its CPU seconds (`cpu_s`: this process's threads and
    the finished sandbox processes; the manifest's record of what a row cost) and `others_cores`:
    the mean cores other processes kept busy meanwhile (`harness.backends.contention.Contention`:
    on two cores another process's work shows in the run's throughput). With reused answers, the
    reused examples count their modeled seconds instead of the time spent reusing them
    (`measured_wall_s` keeps the clock; `cpu_s` is always what was spent)."""
    session["wall_s"] = round(time.perf_counter() - start, 3)
    if cpu0 is not None:
        session["cpu_s"] = round(_cpu_seconds() - cpu0, 3)
    if busy is not None and (cores := busy.so_far()) is not None:
        session["others_cores"] = cores
    if reuse:
        session["measured_wall_s"] = session["wall_s"]
        session["reused"]["spent_s"] = round(reuse["spent"], 3)
        wall = session["wall_s"] - reuse["spent"] + session["reused"]["seconds"]
        session["wall_s"] = round(wall, 3)


# What must match between a run and the small-only / large-only runs whose answers it reuses.
REUSE_IDENTITY = ("task", "task_args", "split", "split_seed", "decode", "model_sources")


def reuse_mode(router) -> str:
    """How `router` can reuse small-only / large-only answers: "query" (a query-level router),
    "oracle" (the oracle drafting one token a step, `harness.evaluation.replay`) or "" (it cannot)."""
    if router.needs().query:
        return "query"
    return "oracle" if router.name == "oracle" and getattr(router, "draft_len", 1) == 1 else ""


def reused_runs(spec: str, router, identity: dict, cfg) -> dict:
    """`--reuse-answers SMALL_RUN,LARGE_RUN`: {"mode": "query" or "oracle", "runs": {route:
    folder}, "records": {route: {example_id: record}}, "rate": {route: tokens/s}}, after checking
    that the router is query-level or the oracle (one drafted token per step), decoding is
    greedy and both runs decoded the same task split with the same decoding and models as this
    run. `rate` is each run's measured throughput (its batch size's, all its sessions)."""
    from harness.metrics.quality import throughput

    mode = reuse_mode(router)
    if router.name == "oracle" and not mode:
        raise UserError("--reuse-answers replays the oracle with draft_len=1 only")
    if not mode:
        raise UserError(
            f"--reuse-answers is for query routers and the oracle; {router.name} decodes per token"
        )
    if cfg.temperature != 0:
        raise UserError("--reuse-answers needs greedy decoding (--temperature 0)")
    folders = [Path(f.strip()) for f in spec.split(",")]
    if len(folders) != 2 or not all(str(f) != "." for f in folders):
        raise UserError(f"--reuse-answers takes SMALL_RUN,LARGE_RUN, got {spec!r}")
    out: dict = {"mode": mode, "runs": {}, "records": {}, "rate": {}}
    for route, folder in zip(("small", "large"), folders, strict=True):
        run = RunFolder(folder)
        if not run.exists():
            raise UserError(f"--reuse-answers: {folder} is not a run folder (it has no manifest)")
        theirs = run.manifest()
        if theirs.get("router") != route:
            raise UserError(
                f"--reuse-answers: {folder} is a {theirs.get('router')} run, not a {route} one"
            )
        diff = [k for k in REUSE_IDENTITY if theirs.get(k) != identity.get(k)]
        if diff:
            raise UserError(f"--reuse-answers: {folder} differs from this run in {', '.join(diff)}")
        rate = throughput(theirs)["throughput_tok_per_s"]
        if not rate > 0:
            raise UserError(f"--reuse-answers: {folder} has no measured throughput")
        out["runs"][route] = str(folder)
        out["records"][route] = run.done()
        out["rate"][route] = rate
    return out


def reused_seconds(reuse: dict, job, gen) -> float | None:
    """Modeled seconds of an example whose answer was reused (None: it was decoded): a query
    route's answer costs its tokens over its run's throughput; a replayed oracle its modeled
    clock (`harness.evaluation.replay`)."""
    answers = job.answers or {}
    if reuse["mode"] == "oracle":
        return gen.seconds if "large" in answers else None
    if gen.query_route in answers:
        return len(gen.token_ids) / reuse["rate"][gen.query_route]
    return None


def reused_answers(reuse: dict, example_id: str, prompt_ids: list[int]) -> dict:
    """{route: Generation} of the reused runs' answers to this example (routes that have one)."""
    from harness.core.records import Generation

    answers = {}
    for route, records in reuse["records"].items():
        if example_id in records:
            try:
                answers[route] = Generation.from_json(records[example_id]["generation"], prompt_ids)
            except ValueError as e:
                raise UserError(
                    f"--reuse-answers: {reuse['runs'][route]} answered {example_id} from another "
                    f"prompt ({e})"
                ) from None
    return answers


def _progress(records, metric: str) -> str:
    records = list(records)
    if not records:
        return ""
    acc = sum(r["scores"].get(metric, 0.0) for r in records) / len(records)
    emitted = sum(len(r["generation"]["provenance"]) for r in records)
    large = sum(sum(r["generation"]["provenance"]) for r in records)
    return f"{metric}={acc:.3f} large_share={large / emitted if emitted else float('nan'):.3f}"


def write_summary(folder: RunFolder, records: list[dict], manifest: dict) -> dict:
    """Summarize `records` (this invocation's examples) with the folder's failed ones."""
    from harness.metrics.quality import summarize

    summary = summarize(records + folder.failed(), manifest)
    folder.write_summary(summary)
    return summary


def _done_text(done: dict, examples: list) -> str:
    """'12 of 200 examples done, 188 to decode': what a run holds and what remains of it."""
    n = sum(ex.id in done for ex in examples)
    return f"{n} of {len(examples)} examples done" + (
        f", {len(examples) - n} to decode" if n < len(examples) else ""
    )


def environment() -> dict:
    """Package versions, git commit and machine facts for the manifest."""
    from importlib import metadata

    versions = {}
    for pkg in ("hybridbench", "torch", "transformers", "tokenizers", "numpy", "llama_cpp_python"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    versions["python"] = platform.python_version()
    return {
        "versions": versions,
        "git_commit": git_commit(),
        "machine": machine(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def git_commit() -> str:
    """The commit of the code that runs ('' outside a git checkout)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict:
    """Where this runs: platform, processor (its brand on Linux), its SIMD extensions, CPU
    count, and the id of the machine's cache (`harness.backends.machine.machine_id`)."""
    from harness.backends.machine import cpu_brand, cpu_features, machine_id

    return {
        "id": machine_id(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu": cpu_brand(),
        "cpu_features": cpu_features(),
        "cpus": os.cpu_count(),
    }


def load_engine(spec: RunSpec, router=None):
    """The pair `spec` names, loaded (with the models its router brings: the reward model of
    `reward`), to decode several runs with: `evaluate(spec, engine)`."""
    from routers import get_router

    router = router if router is not None else get_router(spec.router, spec.router_args)
    return engine_from_args(spec, router)


def evaluate(spec: RunSpec, engine=None) -> Summary:
    """`hybridbench run` of `spec`: open or resume its folder (its lock held), decode what is
    left, score, summarize; print the summary line. `engine`: an already loaded pair to decode
    with (the demo shares one across its runs), else the pair the spec names is loaded."""
    from routers import get_router
    from tasks import get_task

    task_args = dict(spec.task_args)
    task = get_task(spec.task, **task_args)
    router_args = dict(spec.router_args)
    router = get_router(spec.router, router_args)
    cfg = decode_config(spec, stop=tuple(task.stop))  # a spec's fields are the options'
    if spec.max_new_tokens is None:
        cfg = cfg.__class__(**{**cfg.__dict__, "max_new_tokens": task.max_new_tokens})
    examples = task.split(spec.split, seed=spec.split_seed)[: spec.limit]
    from tasks.base import check_disjoint

    check_disjoint(
        set(router.used_example_ids()), [ex.id for ex in examples], f"router {spec.router}"
    )
    identity = {
        "task": task.name,
        "task_args": task_args,
        "split": spec.split,
        "split_seed": spec.split_seed,
        "router": spec.router,
        "router_args": {**router.describe(), **router_args},
        "decode": {k: v for k, v in cfg.__dict__.items() if k != "eos_ids"},
        "model_sources": {
            "small": spec.small or "default",
            "large": spec.large or "default",
            "dtype": spec.dtype,
            "backends": backend_kinds(spec),
        },
    }
    identity = json.loads(json.dumps(identity))  # compare as stored: tuples become lists
    out = Path(spec.out)
    folder = RunFolder(out)
    with folder.lock():
        return _run(folder, identity, spec, task, router, examples, cfg, engine)


def _run(
    folder: RunFolder, identity: dict, spec: RunSpec, task, router, examples, cfg, engine
) -> Summary:
    """Open or resume the run in `folder` (its lock held), decode what is left, summarize."""
    from harness.core.registry import changes
    from routers import router_entry
    from tasks import task_entry

    out = folder.path
    manifest = folder.start(
        identity,
        lambda: {
            "metric": task.metric,
            **environment(),
            "seed": spec.seed,
            "temperature": spec.temperature,
            "top_p": spec.top_p,
            "max_new_tokens": identity["decode"]["max_new_tokens"],
        },
    )
    # the resolved classes and the versions that provide them; a resumed run says what changed
    plugins = {
        "router": router_entry(spec.router).provenance(),
        "task": task_entry(spec.task).provenance(),
    }
    if note := changes(manifest.get("plugins"), plugins):
        print(note, file=sys.stderr)
    manifest["plugins"] = plugins
    manifest["limit"] = spec.limit  # what this invocation asks for (the summary covers it)
    trained = list(router.trained_on())
    manifest["router_trained_on"] = trained  # transfer: a learned router run on another task
    manifest["transfer"] = bool(trained) and task.name not in trained
    done = folder.repair()
    todo = [ex for ex in examples if ex.id not in done]
    reuse = reused_runs(spec.reuse_answers, router, identity, cfg) if spec.reuse_answers else None
    print(f"{out}: {_done_text(done, examples)}", file=sys.stderr)
    folder.write_manifest(manifest)  # this invocation's --limit, also when all done
    if todo:
        engine = engine if engine is not None else engine_from_args(spec, router)
        manifest["models"] = engine.model_infos()
        session = {
            "batch": engine.batch,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "git_commit": git_commit(),  # a resumed run may continue on other code or hardware
            "machine": machine(),
        }
        if engine.batch_probe:
            session["batch_probe"] = engine.batch_probe
        if getattr(router, "costs", None):  # measured pass costs an adaptive schedule uses
            session["pass_costs"] = router.costs
        if reuse and reuse["mode"] == "oracle":  # the costs the replay's modeled clock uses
            from harness.backends.pass_costs import pass_cost_record

            session["pass_costs"] = pass_cost_record(engine)
        manifest.setdefault("sessions", []).append(session)
        folder.write_manifest(manifest)
        try:
            decode_examples(
                engine,
                router,
                task,
                todo,
                cfg,
                folder,
                spec.split,
                done,
                session,
                reuse,
                on_progress=lambda: folder.write_manifest(manifest),
            )
            if drain.asked() and any(ex.id not in done for ex in examples):
                raise drain.Drained  # the examples in flight are recorded: stop as Ctrl-C does
        except KeyboardInterrupt:
            # count what is on disk: the interrupt may fall between a record and its bookkeeping
            on_disk = folder.done()
            stopped = f"{out}: stopped, {_done_text(on_disk, examples)}; the same command resumes"
            print(stopped, file=sys.stderr)
            raise
        finally:  # the session's throughput is kept even when it is interrupted
            folder.write_manifest(manifest)
    records = [done[ex.id] for ex in examples if ex.id in done]
    summary = Summary(out, write_summary(folder, records, manifest))
    print(summary.line())
    return summary
