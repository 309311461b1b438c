"""`hybridbench run`: one router on one task split, crash-safe and resumable.

    hybridbench run --task gsm8k --router oracle --limit 5 --out runs/gsm8k-oracle

The run folder holds
  manifest.json  - what ran: task, split, router and its arguments, decode settings, models
                   (source, dtype, device, sizes, sha256), package versions, git commit, machine,
                   the router's and task's classes with the package versions that provide them
                   (`plugins`; a resume whose plugin changed version says so on stderr),
                   and one entry per invocation in `sessions`: batch size (--batch), examples,
                   emitted tokens and wall seconds (the run's throughput)
  records.jsonl  - one `ExampleRecord` per line, appended and fsync'ed as each example is scored
  summary.json   - `harness.metrics.quality.summarize` over the records, written at the end
Re-running the same command resumes: scored examples are skipped, failed ones (an `error` field)
are retried, and a half-written last line from a crash is dropped. Timing fields of the summary
naturally differ between runs; every other field equals an uninterrupted run's (with --batch > 1
on a quantized llama.cpp model, up to near-tie tokens: a resume regroups which generations share
a batched call, and llama.cpp's multi-row kernels round differently; README "Batched evaluation").
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from harness.backends.engine import backend_kinds, decode_config, engine_from_args
from harness.core.records import ExampleRecord
from harness.errors import UserError

# Manifest fields that must match for a folder to be resumed rather than refused.
IDENTITY = ("task", "task_args", "split", "split_seed", "router", "router_args", "decode",
            "model_sources")  # fmt: skip


def _open_run(out: Path, identity: dict, args, metric: str) -> dict:
    """Create the folder and manifest, or check that an existing one is the same run."""
    path = out / "manifest.json"
    if path.exists():
        old = json.loads(path.read_text())
        diff = [k for k in IDENTITY if old.get(k) != identity.get(k)]
        if diff:
            raise UserError(
                f"{out} holds a different run ({', '.join(diff)} differ); use another --out"
            )
        return old
    out.mkdir(parents=True, exist_ok=True)
    manifest = {**identity, "metric": metric, "limit": args.limit, **environment()}
    manifest.update(seed=args.seed, temperature=args.temperature, top_p=args.top_p)
    manifest["max_new_tokens"] = identity["decode"]["max_new_tokens"]
    _write_json(path, manifest)
    return manifest


def decode_examples(
    engine,
    router,
    task,
    examples,
    cfg,
    path: Path,
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

    jobs = (make_job(ex) for ex in examples)
    if reuse and reuse["mode"] == "oracle":
        from harness.evaluation.replay import oracle_generations

        generations = oracle_generations(engine, router, jobs, reuse)
    else:
        generations = engine.generate_many(router, jobs)
    bar = tqdm(total=len(examples), desc=f"{task.name}/{router.name}", unit="ex", file=sys.stderr)
    from harness.backends.batch_size import Contention

    busy = Contention()  # the CPU other processes take meanwhile (`_clock`)
    start = time.perf_counter()
    try:
        with path.open("a", encoding="utf-8") as f:
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
                ).to_json()
                f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())
                if not error:
                    done[ex.id] = rec
                    session["examples"] += 1
                    session["tokens"] += len(gen.token_ids)
                    seconds = reused_seconds(reuse, job, gen) if reuse else None
                    if seconds is not None:
                        session["reused"]["examples"] += 1
                        session["reused"]["seconds"] += seconds
                bar.update()
                bar.set_postfix_str(_progress(done.values(), task.metric))
                _clock(session, start, reuse, busy)
                if on_progress is not None:
                    on_progress()
    finally:
        _clock(session, start, reuse, busy)
        bar.close()


def _clock(session: dict, start: float, reuse: dict | None, busy=None) -> None:
    """The session's wall seconds so far, and `others_cores`: the mean cores other processes
    kept busy meanwhile (`harness.backends.batch_size.Contention`: on two cores another process's work
    shows in the run's throughput). With reused answers, the reused examples count their
    modeled seconds instead of the time spent reusing them (`measured_wall_s` keeps the clock)."""
    session["wall_s"] = round(time.perf_counter() - start, 3)
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
        path = folder / "manifest.json"
        if not path.is_file():
            raise UserError(f"--reuse-answers: {folder} is not a run folder (no manifest.json)")
        theirs = json.loads(path.read_text())
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
        out["records"][route] = load_records(folder / "records.jsonl")
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


def load_records(path: Path, repair: bool = False) -> dict[str, dict]:
    """example_id -> last successful record. With `repair`, rewrite the file without failed
    records, duplicates and a half-written last line, so a resumed file has one line per example."""
    good = {r["example_id"]: r for r in all_lines(path) if not r.get("error")}
    if repair:
        write_records(path, good.values())
    return good


def write_records(path: Path, records) -> None:
    """Replace the records file with `records`, one JSON line each, atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


def write_summary(out: Path, records: list[dict], manifest: dict) -> dict:
    from harness.metrics.quality import summarize

    failed = [r for r in all_lines(out / "records.jsonl") if r.get("error")]
    summary = summarize(records + failed, manifest)
    _write_json(out / "summary.json", summary)
    return summary


def all_lines(path: Path) -> list[dict]:
    """Every parseable line; a line cut by a crash is skipped (its example is decoded again).
    A run folder's records.jsonl.gz is read when its records.jsonl is missing (published runs)."""
    from harness.core.records import read_lines, records_path

    if not path.exists() and path.name == "records.jsonl":
        path = records_path(path.parent) or path
    rows = []
    for line in read_lines(path) if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return rows


# The fields a one-line or one-row summary of a run shows.
HEADLINE = (
    "quality",
    "quality_ci_low",
    "quality_ci_high",
    "large_token_share",
    "large_call_share",
    "tok_per_s",
    "throughput_tok_per_s",
    "batch",
)


def _done_text(done: dict, examples: list) -> str:
    """'12 of 200 examples done, 188 to decode': what a run holds and what remains of it."""
    n = sum(ex.id in done for ex in examples)
    return f"{n} of {len(examples)} examples done" + (
        f", {len(examples) - n} to decode" if n < len(examples) else ""
    )


def _summary_text(s: dict) -> str:
    keys = ("n", "n_failed", *HEADLINE)
    return "  ".join(
        f"{k}={s[k]:.4g}" if isinstance(s.get(k), float) else f"{k}={s.get(k)}"
        for k in keys
        if k in s
    )


def _write_json(path: Path, obj: dict) -> None:
    """Atomic: a crash leaves the old file or the new one, never half of one. NaN is written as
    null so strict JSON readers accept the file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_nan_to_none(obj), indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def _nan_to_none(obj):
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj


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
    count, and the id of the machine's cache (`harness.backends.batch_size.machine_id`)."""
    from harness.backends.batch_size import cpu_brand, cpu_features, machine_id

    return {
        "id": machine_id(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu": cpu_brand(),
        "cpu_features": cpu_features(),
        "cpus": os.cpu_count(),
    }


def evaluate(args, engine=None) -> int:
    """`hybridbench run`; `engine`: an already loaded pair to decode with (the demo shares one
    across its runs), else the pair named in args is loaded."""
    from harness.core.registry import changes
    from routers import get_router, parse_args, router_entry
    from tasks import get_task, task_entry

    task_args = parse_args(args.task_arg)
    task = get_task(args.task, **task_args)
    router_args = parse_args(args.router_arg)
    router = get_router(args.router, router_args)
    if args.limit is not None and args.limit < 0:
        raise UserError(f"--limit must be >= 0, got {args.limit}")
    cfg = decode_config(args, stop=tuple(task.stop))
    if args.max_new_tokens is None:
        cfg = cfg.__class__(**{**cfg.__dict__, "max_new_tokens": task.max_new_tokens})
    examples = task.split(args.split, seed=args.split_seed)[: args.limit]
    from tasks.base import check_disjoint

    check_disjoint(
        set(router.used_example_ids()), [ex.id for ex in examples], f"router {args.router}"
    )
    identity = {
        "task": task.name,
        "task_args": task_args,
        "split": args.split,
        "split_seed": args.split_seed,
        "router": args.router,
        "router_args": {**router.describe(), **router_args},
        "decode": {k: v for k, v in cfg.__dict__.items() if k != "eos_ids"},
        "model_sources": {
            "small": args.small or "default",
            "large": args.large or "default",
            "dtype": args.dtype,
            "backends": backend_kinds(args),
        },
    }
    identity = json.loads(json.dumps(identity))  # compare as stored: tuples become lists
    out = Path(args.out)
    manifest = _open_run(out, identity, args, task.metric)
    # the resolved classes and the versions that provide them; a resumed run says what changed
    plugins = {"router": router_entry(args.router).provenance(),
               "task": task_entry(args.task).provenance()}  # fmt: skip
    if note := changes(manifest.get("plugins"), plugins):
        print(note, file=sys.stderr)
    manifest["plugins"] = plugins
    manifest["limit"] = args.limit  # what this invocation asks for (the summary covers it)
    trained = list(router.trained_on())
    manifest["router_trained_on"] = trained  # transfer: a learned router run on another task
    manifest["transfer"] = bool(trained) and task.name not in trained
    done = load_records(out / "records.jsonl", repair=True)
    todo = [ex for ex in examples if ex.id not in done]
    reuse = reused_runs(args.reuse_answers, router, identity, cfg) if args.reuse_answers else None
    print(f"{out}: {_done_text(done, examples)}", file=sys.stderr)
    _write_json(out / "manifest.json", manifest)  # this invocation's --limit, also when all done
    if todo:
        engine = engine if engine is not None else engine_from_args(args, router)
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
            from harness.backends.batch_size import pass_cost_record

            session["pass_costs"] = pass_cost_record(engine)
        manifest.setdefault("sessions", []).append(session)
        _write_json(out / "manifest.json", manifest)
        try:
            decode_examples(
                engine,
                router,
                task,
                todo,
                cfg,
                out / "records.jsonl",
                args.split,
                done,
                session,
                reuse,
                on_progress=lambda: _write_json(out / "manifest.json", manifest),
            )
        except KeyboardInterrupt:
            # count what is on disk: the interrupt may fall between a record and its bookkeeping
            on_disk = load_records(out / "records.jsonl")
            print(f"{out}: stopped, {_done_text(on_disk, examples)}; the same command resumes",
                  file=sys.stderr)  # fmt: skip
            raise
        finally:  # the session's throughput is kept even when it is interrupted
            _write_json(out / "manifest.json", manifest)
    records = [done[ex.id] for ex in examples if ex.id in done]
    summary = write_summary(out, records, manifest)
    print(_summary_text(summary))
    return 0 if summary.get("n_failed", 0) == 0 else 1
