"""Read a results folder into one table: one row per run, from its summary and manifest.

A run directory (`harness.core.run_folder`, which reads it) holds a manifest, records and usually
a summary; a results folder holds run directories one level down (or is itself one run
directory). Nothing here imports a model: the summary is recomputed from the records with
`harness.metrics.quality` when missing.

    >>> df = load_runs("runs/sweep1")
    >>> df[["router", "setting", "quality", "large_token_share"]]
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.core.run_folder import RunFolder, is_run
from harness.errors import UserError
from harness.metrics.quality import clock_s, summarize

# Router arguments that are a router's main knob, in the order they are looked for.
KNOBS = ("threshold", "rate", "p", "draft_len", "k", "tau", "quantile")
REFERENCES = ("small", "large")  # routers whose runs are the quality references
ANCHORS = "anchors"  # a task folder's large-only speed anchors: a run per machine that needed one
COLUMNS = ("run", "task", "router", "setting", "setting_value", "router_args", "metric", "split")
# a router's runs in the order of the large-token share they realized (a calibrated router's
# threshold falls as its share grows for entropy and rises for the others: sorted by it, one
# router's rows would read 0.35, 0.2, 0.1 and the next's 0.1, 0.2, 0.35); runs that have
# decoded nothing yet (no share) last
RUN_ORDER = ("router", "large_token_share", "setting_value", "setting", "run")


def run_dirs(results_dir: str | Path, missing_ok: bool = False) -> list[Path]:
    """Run directories: `results_dir` itself if it is one, else its subfolders that are. A folder that does not exist is an error, or holds none with `missing_ok`."""
    root = Path(results_dir)
    if not root.is_dir():
        if missing_ok:
            return []
        raise UserError(f"results folder {str(root)!r} does not exist")
    if is_run(root):
        return [root]
    return sorted(p for p in root.iterdir() if is_run(p))


def flag(row, key: str) -> bool:
    """A row's yes/no field (`transfer`, `throughput_modeled`, `contended`): True only where it
    is a true boolean; a row that lacks it (None, or NaN in a frame) is False."""
    return is_true(row.get(key))


def is_true(value) -> bool:
    """Whether `value` is a true boolean (numpy's included); None, NaN and text are not."""
    return isinstance(value, bool | np.bool_) and bool(value)


def _fmt_arg(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str | int | bool) or value is None:
        return str(value)
    return json.dumps(value, sort_keys=True)


# Router arguments that name a file or its digest: provenance, listed in the manifest, not a setting.
FILE_ARGS = ("path", "checkpoint", "calibration")  # router arguments that name a file


def setting_label(router_args: dict) -> str:
    """A router setting as text: `k=v` pairs sorted by key, e.g. `threshold=2`; '' for none.
    File arguments (FILE_ARGS: checkpoints, calibration files) are left out."""
    items = sorted((k, v) for k, v in router_args.items() if k not in FILE_ARGS)
    return ", ".join(f"{k}={_fmt_arg(v)}" for k, v in items)


def _numeric(router_args: dict) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in sorted(router_args.items())
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def main_knob(router_args: dict) -> str:
    """The router argument that is the setting's main knob: the only numeric one, else the
    first of KNOBS present; '' when there is none."""
    numeric = _numeric(router_args)
    if len(numeric) == 1:
        return next(iter(numeric))
    return next((k for k in KNOBS if k in numeric), "")


def decoded(n) -> bool:
    """Whether a run of `n` examples has decoded any (a run the chain has just started has not:
    its summary says 0 tok/s and its quality and shares are NaN, which no table or plot should
    read as a measurement)."""
    return float(n or 0) > 0


SHARE_KNOBS = ("target_share", "p", "share")  # the knobs that ask for a large-token share


def asked_share(router_args: dict) -> float | None:
    """The large-token share a setting asks for (the first of SHARE_KNOBS among its numeric
    arguments, rounded to 6 places); None for a setting that asks for none."""
    numeric = _numeric(router_args)
    knob = next((k for k in SHARE_KNOBS if k in numeric), None)
    return round(numeric[knob], 6) if knob else None


def grid_shares(settings) -> set[float]:
    """The shares of a sweep's grid, from its rows' (router, router_args): the shares asked
    (`asked_share`) by more than half of the routers that ask for one (all of them where no
    share is). A row aimed at another row's share (a matched control, entropy at 0.224; learned
    aimed at r2r's 0.179) is one or two routers' and off the grid."""
    at: dict[float, set] = {}
    for router, args in settings:
        if (s := asked_share(args)) is not None:
            at.setdefault(s, set()).add(router)
    routers = set().union(*at.values()) if at else set()
    return {s for s, rs in at.items() if 2 * len(rs) > len(routers)} or set(at)


def at_grid(df: pd.DataFrame) -> pd.Series:
    """Per row of `load_runs`'s `df`: whether its setting asks for no share or for one of the
    sweep's grid shares (`grid_shares`, over `df`'s rows); all True for rows without router
    arguments."""
    if "router_args" not in df or not len(df):
        return pd.Series(True, index=df.index)
    args = df["router_args"].map(json.loads)
    grid = grid_shares(zip(df["router"], args, strict=True))
    asked = [asked_share(a) for a in args]  # (Series.map would turn None into NaN)
    return pd.Series([s is None or s in grid for s in asked], index=df.index)


def on_grid(df: pd.DataFrame) -> pd.Series:
    """Per row of `df`: whether it is one of its router's own rows (`at_grid`), or its router
    has no row at the grid (a router run only at shares of its own has those as its grid). A
    row off the grid was aimed at another row's share: it is there to be compared with, not a
    subject that needs controls and verdicts of its own."""
    at = at_grid(df)
    return at | ~at.groupby(df["router"]).transform("any").astype(bool)


def setting_value(router_args: dict) -> float:
    """The value of `main_knob` as a float; NaN when there is no knob."""
    knob = main_knob(router_args)
    return _numeric(router_args)[knob] if knob else math.nan


def run_row(run_dir: str | Path, root: str | Path | None = None) -> dict:
    """One row: manifest fields, setting, and the summary (recomputed from records if missing).
    Flags are booleans (`transfer`: a learned router run on a task it was not trained on)."""
    run_dir = Path(run_dir)
    folder = RunFolder(run_dir)
    manifest = folder.manifest()
    summary = folder.summary()
    if summary is None:
        summary = summarize(folder.lines(), manifest)
    args = manifest.get("router_args") or {}
    models = manifest.get("models") or {}
    name = run_dir.name if root is None or Path(root) == run_dir else str(run_dir.relative_to(root))
    row = {**summary}
    row.update(
        run=name,
        path=str(run_dir),
        task=manifest.get("task", summary.get("task", "")),
        router=manifest.get("router", summary.get("router", "")),
        setting=setting_label(args),
        setting_value=setting_value(args),
        router_args=json.dumps(args, sort_keys=True),
        metric=manifest.get("metric", summary.get("metric", "")),
        split=manifest.get("split", summary.get("split", "")),
        seed=manifest.get("seed"),
        transfer=bool(summary.get("transfer", manifest.get("transfer"))),
        throughput_modeled=bool(summary.get("throughput_modeled")),
        git_commit=manifest.get("git_commit", ""),
        started=manifest.get("started", ""),
        model_small=(models.get("small") or {}).get("source", ""),
        model_large=(models.get("large") or {}).get("source", ""),
        **session_totals(manifest),
    )
    return row


def session_totals(manifest: dict) -> dict:
    """What a run's invocations cost, from its manifest's `sessions` (one per `hybridbench run`
    that decoded examples): how many, their batch sizes, examples, tokens and wall seconds on
    the clock summed; their CPU seconds (`session_cpu_s`: those the invocations recorded;
    `session_cpu_bound_s`: for each that did not, its wall seconds times its machine's CPUs, an
    upper bound, nan where its CPU count is unknown; `session_cpu_unrecorded`: how many); each
    model's backend. Runs written before sessions were recorded give 0 sessions."""
    sessions = manifest.get("sessions") or []
    models = manifest.get("models") or {}

    def cpus(s: dict) -> float:  # nan where the machine's CPU count was not recorded
        return float((s.get("machine") or manifest.get("machine") or {}).get("cpus") or "nan")

    unrecorded = [s for s in sessions if "cpu_s" not in s]
    return {
        "sessions": len(sessions),
        "session_batches": ", ".join(
            str(b) for b in sorted({int(s["batch"]) for s in sessions if "batch" in s})
        ),
        "session_examples": sum(int(s.get("examples") or 0) for s in sessions),
        "session_tokens": sum(int(s.get("tokens") or 0) for s in sessions),
        # the clock: a run reusing answers also keeps a modeled wall_s (its throughput's)
        "session_wall_s": sum(map(clock_s, sessions)),
        "session_cpu_s": sum(float(s["cpu_s"]) for s in sessions if "cpu_s" in s),
        "session_cpu_bound_s": sum(clock_s(s) * cpus(s) for s in unrecorded),
        "session_cpu_unrecorded": len(unrecorded),
        "backend_small": (models.get("small") or {}).get("backend", ""),
        "backend_large": (models.get("large") or {}).get("backend", ""),
    }


def load_runs(results_dir: str | Path) -> pd.DataFrame:
    """One row per run under `results_dir`, sorted by task, then RUN_ORDER."""
    root = Path(results_dir)
    return load_run_dirs(run_dirs(root), root)


def load_run_dirs(dirs: list[Path], root: str | Path | None = None) -> pd.DataFrame:
    """One row per run folder of `dirs` (named relative to `root`, else by its own name),
    sorted as `load_runs` sorts."""
    rows = [run_row(d, root) for d in dirs]
    if not rows:
        return pd.DataFrame(columns=list(COLUMNS))
    df = pd.DataFrame(rows)
    first = [c for c in COLUMNS if c in df.columns]
    df = df[first + sorted(c for c in df.columns if c not in first)]
    keys = ["task", *(k for k in RUN_ORDER if k in df.columns)]
    return df.sort_values(keys, na_position="last").reset_index(drop=True)


def anchor_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The speed anchors beside `df`'s runs: run directories under `ANCHORS` in each run's
    parent folder (large-only on a task's first examples, decoded on a machine that ran too
    little of large's own row; named by the machine's id)."""
    folders = sorted({Path(p).parent / ANCHORS for p in df.get("path", [])})
    rows = [run_row(d, f.parent) for f in folders for d in run_dirs(f, missing_ok=True)]
    return pd.DataFrame(rows, columns=None if rows else list(COLUMNS))


def add_speed(df: pd.DataFrame, with_anchors: bool = False) -> pd.DataFrame:
    """`df` with the machines its runs decoded on and their speed against large-only there
    (`with_anchors`: followed by its speed anchors' rows, `anchor_runs`, marked in `anchor`):

    session_machines   JSON list: per session of the manifest, its machine's label ("A", "B",
                       ... in order of first use over `df` and its anchors; harness.metrics.machines)
    machines           examples per machine over the throughput's sessions: 'A 158, B 42'
    machine_rates      JSON: the same per machine, with tokens, wall seconds and how many
                       sessions recorded other processes busy (`harness.metrics.machines.by_machine`)
    machine_rates_quiet  JSON: the same over the sessions recorded quiet
    contended          whether any of those sessions recorded other processes busy
    vs_large           throughput / large-only's on the same machine(s), pooled over the task's
                       large runs and its anchors (their sessions recorded quiet where a
                       machine has some: `harness.metrics.machines.vs_large`); for runs that
                       recorded no sessions (the first release's) their decode rate / the
                       task's large runs' mean decode rate, as those reports always did
    vs_large_examples  the examples that ratio is over (`harness.metrics.machines.covered`: a machine
                       no large-only run decoded on is left out of it), of
    speed_examples     all examples over the throughput's sessions
    """
    from harness.metrics.machines import by_machine, covered, session_machines, vs_large

    anchors = anchor_runs(df)
    both = pd.concat([df, anchors], ignore_index=True) if len(anchors) else df
    manifests = {p: RunFolder(p).manifest() for p in both.get("path", [])}
    labels = session_machines(manifests)
    by = {p: by_machine(m, labels[p]) for p, m in manifests.items()}
    calm = {p: by_machine(m, labels[p], quiet_only=True) for p, m in manifests.items()}
    ratio: dict[str, float] = {}
    cover: dict[str, float] = {}
    for _, g in both.groupby("task") if len(both) else []:
        large = list(g.loc[g["router"] == "large", "path"])
        runs = {p: by[p] for p in g["path"]}
        ratio.update(vs_large(runs, large, calm))
        cover.update(covered(runs, large, calm))
        old = g[g["path"].map(lambda p: not by[p])]  # no sessions: per-stream decode rates
        if len(old):
            large = old.loc[old["router"] == "large", "tok_per_s"].astype(float)
            rate = float(large.mean()) if len(large) else math.nan
            rates = zip(old["path"], old["tok_per_s"], strict=True)
            ratio.update({p: float(t) / rate if rate > 0 else math.nan for p, t in rates})
    out = both.copy() if with_anchors else df.copy()
    if with_anchors:
        out["anchor"] = out["path"].isin(set(anchors.get("path", [])))
    paths = list(out.get("path", []))
    out["session_machines"] = [json.dumps(labels.get(p, [])) for p in paths]
    out["machines"] = [
        ", ".join(f"{m} {int(d['examples'])}" for m, d in sorted(by.get(p, {}).items()))
        for p in paths
    ]
    out["machine_rates"] = [json.dumps(by.get(p, {}), sort_keys=True) for p in paths]
    out["machine_rates_quiet"] = [json.dumps(calm.get(p, {}), sort_keys=True) for p in paths]
    out["contended"] = [any(d["contended"] for d in by.get(p, {}).values()) for p in paths]
    out["vs_large"] = [ratio.get(p, math.nan) for p in paths]
    out["speed_examples"] = [sum(d["examples"] for d in by.get(p, {}).values()) for p in paths]
    out["vs_large_examples"] = [cover.get(p, 0.0) for p in paths]
    return out
