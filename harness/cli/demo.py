"""`hybridbench demo`: the routing comparison itself, live on the real pair, in a few minutes.

    hybridbench demo                      # mbpp, first 8 test examples, routers at a 20% share

Small-only and large-only set the two ends; random sends 20% of the tokens to large; entropy
(its threshold calibrated on small's own answers to mbpp's calib split, the file shipped in
routers/data/) and the published CITER router (its checkpoint and calibration in
reports/published/routers/, in a clone of the repository) aim at the same share. For each the
demo prints quality, the large-token share it realized, the share of the small-to-large gap it
recovered, and its throughput; beside it, where the published edition is in the tree, the gap
the same router recovered there on 200 examples. Each router's run is an ordinary run folder
under --out/TASK (resumable; `hybridbench report runs/demo/mbpp` reads them); the pair is
loaded once.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import math
import time
from pathlib import Path

from harness.cli import options
from harness.cli import run as run_command
from harness.core.run_folder import RunFolder
from harness.metrics.quality import clock_s

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "reports" / "published"
ROUTER_DATA = ROOT / "routers" / "data"
DEMO_ROUTERS = "small,large,random,entropy,citer"
DEMO_TOKENS = 128  # a bound on time (a looping answer): the first 8 mbpp answers are shorter
DEMO_N_CTX = 1024  # per sequence: mbpp's prompt and DEMO_TOKENS fit


def configure(p) -> None:
    p.add_argument("--task", default="mbpp", help="task (default mbpp: short answers)")
    p.add_argument(
        "--routers",
        type=options.names,
        default=DEMO_ROUTERS,
        help="comma-separated, of: " + DEMO_ROUTERS,
    )
    p.add_argument(
        "--share",
        type=float,
        default=0.2,
        help="large-token share the routers aim at (default 0.2)",
    )
    p.add_argument("--limit", type=int, default=8, help="test examples per router (default 8)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEMO_TOKENS,
        help=f"answer cap (default {DEMO_TOKENS}); 0 = the task's own budget",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=0,
        help="generations decoded together (default: all --limit at once)",
    )
    p.add_argument("--out", default="runs/demo", help="results folder, one run per router")
    options.add_model_args(p, n_ctx=DEMO_N_CTX)


def router_args(name: str, task: str, share: float) -> list[str] | str:
    """The `--router-arg`s of a demo row, or why the row cannot run here."""
    if name in ("small", "large"):
        return []
    if name == "random":
        return [f"p={share:g}"]
    if name == "entropy":
        cal = ROUTER_DATA / f"{task}-entropy.json"
        if not cal.is_file():
            return f"no shipped entropy calibration for {task} (routers/data/)"
        return [f"target_share={share:g}", f"calibration={cal}"]
    if name == "citer":
        files = published_citer(task)
        if files is None:
            return f"no published CITER router for {task}"
        ckpt, cal = files
        if not (ckpt.is_file() and cal.is_file()):
            return f"the published CITER checkpoint is not here ({ckpt}: a clone has it)"
        return [f"path={ckpt}", f"target_share={share:g}", f"calibration={cal}"]
    return f"not a demo router (the demo runs {DEMO_ROUTERS})"


def run(args) -> int:
    """Run each router on the first `limit` test examples (resumable) and print one table."""
    from harness.errors import UserError

    start = time.perf_counter()
    names = list(args.routers)
    if not {"small", "large"} <= set(names):
        raise UserError("the demo needs small and large: the gap is measured between them")
    models = ["--dtype", args.dtype, "--threads", str(args.threads)]
    models += ["--small-device", args.small_device, "--large-device", args.large_device]
    for flag in ("small", "large", "backend", "small_backend", "large_backend"):
        if getattr(args, flag) is not None:
            models += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    models += ["--n-ctx", str(args.n_ctx or DEMO_N_CTX)]
    models += ["--batch", str(args.batch or max(args.limit, 1))]
    if args.max_new_tokens:
        models += ["--max-new-tokens", str(args.max_new_tokens)]
    root, shared, rows, skipped = Path(args.out) / args.task, {}, [], []
    for name in names:
        extra = router_args(name, args.task, args.share)
        if isinstance(extra, str):
            skipped.append(f"{name}: skipped, {extra}")
            continue
        argv = ["--task", args.task, "--router", name, "--limit", str(args.limit)]
        argv += [x for a in extra for x in ("--router-arg", a)]
        try:
            _run_shared([*argv, "--out", str(root / name), *models], shared)
        except UserError as e:  # a router that cannot run with these models: say so, go on
            if name in ("small", "large"):
                raise
            skipped.append(f"{name}: not run, {e}")
            continue
        run = RunFolder(root / name)
        manifest, summary = run.manifest(), run.summary() or {}
        sessions = manifest.get("sessions") or []
        wall = sum(map(clock_s, sessions))
        rows.append({**summary, "router_args": manifest.get("router_args") or {}, "wall_s": wall})
    print(demo_table(rows, published_gaps(args.task, args.share)))
    print(*skipped, sep="\n") if skipped else None
    wall = time.perf_counter() - start
    load = shared.get("load_s", 0.0)
    print(
        f"\n{len(rows)} routers x {args.limit} {args.task} test examples in {_minutes_seconds(wall)} "
        f"(loading the pair: {_minutes_seconds(load)}); runs in {root}/"
    )
    return 0


def _minutes_seconds(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def _run_shared(argv: list[str], shared: dict) -> int:
    """One `hybridbench run` (its options in `argv`) with the pair loaded once for all of the
    demo's runs (`shared` keeps it). Models a router brings join a copy of that engine for its
    run. The run's own summary line is not printed (the demo prints its table); a UserError
    goes up to the command line, which prints it."""
    from harness.backends import engine as engines
    from harness.evaluation.runner import evaluate
    from harness.evaluation.spec import RunSpec
    from routers import get_router

    parser = argparse.ArgumentParser(prog="hybridbench run")
    run_command.configure(parser)
    spec = RunSpec.from_args(parser.parse_args(argv))
    router = get_router(spec.router, spec.router_args)
    if "engine" not in shared:
        t = time.perf_counter()
        shared["engine"] = engines.engine_from_args(spec)
        shared["load_s"] = time.perf_counter() - t
    pair = shared["engine"]
    extra = router.backends(pair)  # what engine_from_args would attach (and its checks)
    engine = pair
    if extra:
        engine = engines.Engine(pair.tokenizer, {**pair.backends, **extra}, pair.batch)
        engine.batch_probe = pair.batch_probe
    with contextlib.redirect_stdout(io.StringIO()):
        return 0 if evaluate(spec, engine=engine).n_failed == 0 else 1


@functools.cache
def published_runs(task: str):
    """The published edition's runs of `task` (reports.load.load_runs of PUBLISHED/TASK); None
    where the edition is not in the tree."""
    from reports.load import load_runs

    folder = PUBLISHED / task
    return load_runs(folder) if folder.is_dir() else None


def published_citer(task: str) -> tuple[Path, Path] | None:
    """(checkpoint, calibration) of the CITER router the published edition ran on `task`: the
    files its runs name in their router arguments, found under the copies PUBLISHED/routers/
    keeps of them (routers/files.json: stored name -> the path the runs used); None where no
    published run of `task` is a CITER run."""
    df = published_runs(task)
    rows = [] if df is None else df.loc[df["router"] == "citer", "router_args"]
    if len(rows) == 0:
        return None
    used = json.loads(rows.iloc[0])
    index = PUBLISHED / "routers" / "files.json"
    stored = json.loads(index.read_text()) if index.is_file() else {}
    by_use = {v["used_as"]: name for name, v in stored.items()}
    return tuple(
        PUBLISHED / "routers" / by_use.get(used[k], Path(used[k]).name)
        for k in ("path", "calibration")
    )


def published_gaps(task: str, share: float) -> dict[str, float]:
    """The gap each demo router recovered in the published edition (PUBLISHED/TASK), at the
    same setting: router -> PGR; {} where the edition is not in the tree."""
    from harness.metrics.frontier import pgr

    df = published_runs(task)
    if df is None:
        return {}
    ref = {r: df.loc[df["router"] == r, "quality"].mean() for r in ("small", "large")}
    wanted = {
        "random": ("p", share),
        "entropy": ("target_share", share),
        "citer": ("target_share", share),
    }
    out = {"small": 0.0, "large": 1.0}
    for router in ("small", "large"):
        out[f"{router}_n"] = int(df.loc[df["router"] == router, "n"].max())
    for router, (key, value) in wanted.items():
        for _, r in df[df["router"] == router].iterrows():
            if math.isclose(float(json.loads(r["router_args"]).get(key, math.nan)), value):
                out[router] = pgr(r["quality"], ref["small"], ref["large"])
                out[f"{router}_n"] = int(r["n"])
    return out


def _f(x, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def demo_table(rows: list[dict], published: dict | None = None) -> str:
    """Markdown table of the demo's run summaries: quality with its 95% interval, the
    large-token share, the gap recovered between this demo's small-only and large-only runs,
    throughput, and the gap the published edition measured for the same router and setting."""
    from harness.metrics.frontier import pgr

    published = published or {}
    q = {s["router"]: s.get("quality") for s in rows}
    q_small, q_large = (math.nan if q.get(r) is None else q[r] for r in ("small", "large"))
    lines = [
        "| router | setting | n | quality [95% CI] | large-token share | gap recovered "
        "| tok/s, all streams | wall s | published edition: gap recovered |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in rows:
        router = s["router"]
        quality = s.get("quality")
        gap = pgr(quality, q_small, q_large) if quality is not None else math.nan
        gap_text = "—" if math.isnan(gap) else f"{100 * gap:.0f}%"
        rate = s.get("throughput_tok_per_s")
        rate_text = _f(rate, 1) + (" (modeled)" if s.get("throughput_modeled") else "")
        pub = published.get(router)
        n = published.get(f"{router}_n")
        pub_text = "—" if pub is None or math.isnan(pub) else f"{100 * pub:.0f}%"
        pub_text += f" (n = {n})" if n else ""
        lines.append(
            f"| {router} | {_setting(s)} | {s['n']} | {_f(quality)} [{_f(s.get('quality_ci_low'))}, "
            f"{_f(s.get('quality_ci_high'))}] | {_f(s.get('large_token_share'))} | {gap_text} "
            f"| {rate_text} | {_f(s.get('wall_s'), 0)} | {pub_text} |"
        )
    n = max((int(s["n"]) for s in rows if s["router"] in ("small", "large")), default=0)
    if not math.isnan(q_small - q_large) and q_small == q_large:
        lines.append("\nsmall-only and large-only score the same here: no gap to recover.")
    elif n and not math.isnan(q_large - q_small):
        step = 100 / n / abs(q_large - q_small)
        said = (
            f"\ngap recovered = (q - q_small) / (q_large - q_small) on these {n} examples: "
            f"one example moves it by {step:.0f} points."
        )
        if published.get("small_n"):
            said += (
                " The last column is the published edition's measurement of the same "
                f"router and setting ({published['small_n']} examples)."
            )
        lines.append(said)
    return "\n".join(lines)


def _setting(summary: dict) -> str:
    """The run's setting for reading: 'target 20% (threshold 0.744)', 'p = 0.2', '—'."""
    from reports.text import setting_text

    args = summary.get("router_args") or {}
    return setting_text(args)
