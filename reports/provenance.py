"""Where a task's runs came from and what they took: the setup, cost and provenance tables,
read from the run manifests and their invocations (`sessions`: one per `hybridbench run` that
decoded examples)."""

from __future__ import annotations

import json
import math

import pandas as pd

from harness.core.run_folder import RunFolder
from reports.load import add_speed
from reports.tables import Table
from reports.text import is_modeled


def _backends(small: str, large: str) -> str:
    small, large = small or "—", large or "—"
    return small if small == large else f"{small} / {large}"


def hours(seconds: float) -> str:
    """Seconds as hours with two decimals: 1800 -> '0.50'."""
    return f"{seconds / 3600:.2f}"


def cpu_hours(recorded: float, bound: float, unrecorded: int) -> str:
    """CPU hours: those recorded, or with `unrecorded` invocations '≤' recorded plus their
    upper `bound` (wall times CPUs; '?' where that is unknown)."""
    if not unrecorded:
        return hours(recorded)
    return "?" if math.isnan(bound) else f"≤ {(recorded + bound) / 3600:.2f}"


def run_cpu_hours(r) -> str:
    """A run's (`reports.load.session_totals` columns) CPU hours, as `cpu_hours`."""
    return cpu_hours(r["session_cpu_s"], r["session_cpu_bound_s"], int(r["session_cpu_unrecorded"]))


def cost_table(df: pd.DataFrame, anchors: pd.DataFrame | None = None) -> Table:
    """Each run's invocations summed (reports.load.session_totals), then each speed anchor's,
    and all of them together: what the task's sweep took. A run that reused answers ran only
    its routing passes: its hours count, its examples/hour is not a decoding rate ('—'). CPU
    hours are those the invocations recorded (the process's threads and its sandboxed tests);
    where some did not record them, '≤' and their wall hours times the machine's CPUs added."""
    df = df.sort_values("run")
    if anchors is not None and len(anchors):
        df = pd.concat([df, anchors.sort_values("run")], ignore_index=True)

    def per_hour(examples: int, seconds: float) -> str:
        return f"{examples / (seconds / 3600):.1f}" if seconds > 0 else "—"

    rows = [
        (
            r["run"],
            _backends(r["backend_small"], r["backend_large"]),
            r["session_batches"] or "—",
            str(int(r["sessions"])),
            str(int(r["session_examples"])),
            str(int(r["session_tokens"])),
            hours(r["session_wall_s"]),
            run_cpu_hours(r),
            "— (answers reused)"
            if is_modeled(r)
            else per_hour(int(r["session_examples"]), r["session_wall_s"]),
        )
        for _, r in df.iterrows()
    ]
    examples, wall = int(df["session_examples"].sum()), float(df["session_wall_s"].sum())
    rows.append(
        (
            "all runs",
            "",
            "",
            str(int(df["sessions"].sum())),
            str(examples),
            str(int(df["session_tokens"].sum())),
            hours(wall),
            cpu_hours(
                float(df["session_cpu_s"].sum()),
                float(df["session_cpu_bound_s"].sum(skipna=False)),
                int(df["session_cpu_unrecorded"].sum()),
            ),
            per_hour(examples, wall),
        )
    )
    header = (
        "run",
        "backend (small / large)",
        "batch",
        "invocations",
        "examples",
        "tokens",
        "wall hours",
        "CPU hours",
        "examples/hour",
    )
    return Table("Cost: wall and CPU time on the machine that ran each run", header, tuple(rows))


def machine_text(cpu: str, mach: dict, probe: dict | None) -> str:
    """'id ab0be9c69195, AMD EPYC, 2 CPUs, avx/avx2/fma/f16c, probe 2025-01-02: large's
    16-sequence step 0.678 s (others' CPU meanwhile: not recorded)': one CPU brand covers
    machines 1.5x apart in speed, so the SIMD extensions and the batch probe's slowest measured
    step tell them apart where no id was recorded; the id names one machine across task
    folders, whose labels are each their own."""
    text = f"id {mach['id']}, " if mach.get("id") else ""
    text += f"{cpu}, {mach.get('cpus', '?')} CPUs"
    if mach.get("cpu_features"):
        text += ", " + "/".join(mach["cpu_features"])
    steps = ((probe or {}).get("step_seconds") or {}).get("large") or {}
    if steps:
        b = max(steps, key=int)
        # a router's own step shape (speculative: k + 1 tokens per sequence) costs more
        tokens = ((probe.get("shape") or {}).get("large") or [1, 1])[1]
        each = f" of {tokens} tokens each" if tokens > 1 else ""
        busy = probe.get("others_cores")  # absent from the first probes
        busy = "not recorded" if busy is None else f"{float(busy):.2f} cores"
        text += (
            f", probe {str(probe.get('measured', '?'))[:10]}: large's {b}-sequence step"
            f"{each} {float(steps[b]):.3f} s (others' CPU meanwhile: {busy})"
        )
    return text


def setup_facts(df: pd.DataFrame) -> dict[str, set]:
    """What the runs were made with, from their manifests and invocations: machines (by label),
    dates, code commits, models (source, GGUF types, sha256), backends, batch sizes, decoding."""
    df = df if "session_machines" in df else add_speed(df)
    found: dict[str, set] = {
        k: set()
        for k in (
            "machine",
            "dates",
            "commit",
            "small",
            "large",
            "backend",
            "batch",
            "decoding",
            "cpu",
        )
    }
    latest: dict[str, tuple[str, str]] = {}  # machine label -> its latest invocation's text
    for path, labels in zip(df["path"], df["session_machines"], strict=True):
        m = RunFolder(path).manifest()
        sessions = m.get("sessions") or []
        labels = json.loads(labels)
        for i, where in enumerate([m, *sessions]):
            mach = {**(m.get("machine") or {}), **(where.get("machine") or {})}
            cpu = mach.get("cpu") or (where.get("batch_probe") or {}).get("cpu")  # older runs
            if cpu:
                found["cpu"].add(f"{mach.get('cpus', '?')}-core {cpu}")
            if cpu and i:  # an invocation: described under its machine's label
                text = machine_text(cpu, mach, where.get("batch_probe"))
                when = str(where.get("started", ""))
                if when >= latest.get(labels[i - 1], ("", ""))[0]:
                    latest[labels[i - 1]] = (when, text)
            elif cpu and not sessions:
                found["machine"].add(machine_text(cpu, mach, where.get("batch_probe")))
            if where.get("git_commit"):
                found["commit"].add(str(where["git_commit"])[:12])
            if where.get("started"):
                found["dates"].add(str(where["started"])[:10])
            if "batch" in where and where is not m:
                found["batch"].add(int(where["batch"]))
        for role in ("small", "large"):
            info = (m.get("models") or {}).get(role) or {}
            if info:
                sha = str(info.get("sha256") or "")[:12]
                found[role].add(
                    f"{info.get('source', '?')} ({info.get('dtype', '?')}"
                    + (f"; sha256 {sha})" if sha else ")")
                )
                found["backend"].add(str(info.get("backend", "?")))
        found["decoding"].add(
            f"temperature {m.get('temperature', '?')}, "
            f"max new tokens {m.get('max_new_tokens', '?')}"
        )
    found["machine"] |= {f"{label}: {text}" for label, (_, text) in latest.items()}
    return found


def setup_table(df: pd.DataFrame) -> Table:
    """The setup of a task's runs (`setup_facts`), a row per kind of fact."""
    found = setup_facts(df)
    found.pop("cpu")
    if not found["machine"]:  # runs from before invocations kept their machine
        found["machine"] = {"not recorded (see the provenance table)"}
    dates = sorted(found.pop("dates"))
    rows = [("dates", f"{dates[0]} to {dates[-1]}" if dates else "—")]
    names = {
        "machine": "machines",
        "commit": "code commits",
        "small": "small model",
        "large": "large model",
        "backend": "backends",
        "batch": "batch sizes",
        "decoding": "decoding",
    }
    rows += [(names[k], "; ".join(str(x) for x in sorted(v)) or "—") for k, v in found.items()]
    return Table("Setup (from the run manifests)", ("", "value"), tuple(rows))


def provenance_table(df: pd.DataFrame) -> Table:
    """Where each run came from: its folder, exact router arguments, commit, start time and
    models, as the manifests say."""
    rows = tuple(
        (
            r["run"],
            r["router"],
            r["setting"] or "—",
            str(r["git_commit"])[:12],
            str(r["started"]),
            str(r["model_small"]),
            str(r["model_large"]),
        )
        for _, r in df.sort_values("run").iterrows()
    )
    header = ("run", "router", "arguments", "commit", "started", "small model", "large model")
    return Table("Provenance", header, rows)
