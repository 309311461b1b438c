"""Which machine decoded each session of a run, and speeds compared only within one machine.

Two machines sold under one CPU name ("AMD EPYC") have decoded large-only 1.5x apart, so a
speed ratio is only valid between sessions decoded on one machine. A session names its machine
by `machine.id`, a random id kept in the machine's cache folder. A session recorded without
that id is tied to a machine through its batch probe:
the probe is measured once per machine and kept in that same folder, so sessions that used one
probe measurement ran on one machine, and any of them that records an id names it.

    >>> labels = session_machines({"run1": manifest1, "run2": manifest2})  # name -> per session
    >>> by = {name: by_machine(m, labels[name]) for name, m in manifests.items()}
    >>> vs_large(by, ["large__default", "anchors/ab0be9c69195"])          # name -> ratio
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Iterable, Mapping

from harness.metrics.quality import clock_s, rate_sessions

Sums = Mapping[str, Mapping[str, Mapping[str, float]]]  # run -> machine -> `by_machine`'s sums

BUSY_CORES = 0.25  # other processes' mean CPU use (cores) above which a timing is contended
# (HYBRIDBENCH_BUSY_CORES overrides it where timings are taken: the tests set "inf", their
# timings being of tiny models)


def _nodes(session: Mapping, manifest: Mapping) -> list[str]:
    """What ties a session to a machine: its recorded id, its batch probe's measurement; for a
    session with neither, the machine as described (the run's when the session has none)."""
    nodes = []
    if (session.get("machine") or {}).get("id"):
        nodes.append(f"id:{session['machine']['id']}")
    probe = session.get("batch_probe") or {}
    if probe.get("measured") and probe.get("step_seconds"):
        steps = json.dumps(probe["step_seconds"], sort_keys=True)
        nodes.append(f"probe:{probe['measured']}|{probe.get('threads')}|{steps}")
    described = session.get("machine") or manifest.get("machine")
    if not nodes and described:
        nodes.append(f"described:{json.dumps(described, sort_keys=True)}")
    return nodes


def session_machines(manifests: Mapping[str, Mapping]) -> dict[str, list[str]]:
    """Per run name, per session of its manifest: the label of the machine that ran it, "A",
    "B", ... in the order of each machine's first session (by `started`). Sessions sharing an id
    or a probe measurement, directly or through others, get one label; a session with neither
    shares one with those described alike, and one that says nothing gets a label of its own."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    nodes = {}
    for name, m in manifests.items():
        for i, s in enumerate(m.get("sessions") or []):
            ns = _nodes(s, m) or [f"session:{name}:{i}"]
            for other in ns[1:]:
                parent[find(other)] = find(ns[0])
            nodes[name, i] = (ns[0], str(s.get("started", "")))
    first: dict[str, str] = {}
    for node, started in nodes.values():
        root = find(node)
        first[root] = min(first.get(root, started), started)
    order = sorted(first, key=lambda r: (first[r], r))
    label = {root: _label(i) for i, root in enumerate(order)}
    out: dict[str, list[str]] = {name: [] for name in manifests}
    for (name, _), (node, _) in nodes.items():
        out[name].append(label[find(node)])
    return out


def _label(i: int) -> str:
    letters = string.ascii_uppercase
    return letters[i] if i < len(letters) else f"M{i + 1}"


def quiet(session: Mapping) -> bool | None:
    """Whether other processes kept at most BUSY_CORES busy during the session (its recorded
    `others_cores`); None for a session that did not record it (runs made before the harness
    recorded it)."""
    cores = session.get("others_cores")
    return None if cores is None else float(cores) <= BUSY_CORES


def by_machine(
    manifest: Mapping, labels: list[str], quiet_only: bool = False
) -> dict[str, dict[str, float]]:
    """A run's throughput sessions (`metrics.rate_sessions`) summed per machine label: tokens,
    wall seconds (a run reusing answers: its modeled clock), examples, and `contended`: how
    many of them recorded more than BUSY_CORES used by other processes. `quiet_only`: only the
    sessions recorded quiet."""
    which = {id(s): lab for s, lab in zip(manifest.get("sessions") or [], labels, strict=True)}
    out: dict[str, dict[str, float]] = {}
    for s in rate_sessions(manifest):
        if quiet_only and not quiet(s):
            continue
        d = out.setdefault(
            which[id(s)], {"tokens": 0.0, "wall_s": 0.0, "examples": 0.0, "contended": 0.0}
        )
        d["tokens"] += float(s.get("tokens") or 0)
        d["wall_s"] += float(s.get("wall_s") or 0)
        d["examples"] += float(s.get("examples") or 0)
        d["contended"] += quiet(s) is False
    return out


def vs_large(by: Sums, large: Iterable[str], quiet_large: Sums | None = None) -> dict[str, float]:
    """Each run's throughput relative to large-only's on the machines it ran on: its tokens over
    the tokens large-only would have emitted in the same wall time, machine by machine,
        sum_M tokens_M / sum_M (wall_M * large_M),
    large_M pooling (tokens / wall) every large-only run in `large` (a task's large row and its
    speed anchors) on machine M; where `quiet_large` (their sessions recorded quiet,
    `by_machine(quiet_only=True)`) has some on M, those alone. A run wholly on one machine gets
    its rate / large's rate there. The sums leave out machines no large-only run decoded on
    (`covered` says how many of a run's examples the ratio is over). NaN for a run that recorded
    no sessions, has decoded nothing yet, or ran only on such machines."""
    rate = large_rates(by, large, quiet_large)
    out = {}
    for name, per in by.items():
        per = {m: d for m, d in per.items() if m in rate}
        baseline = sum(d["wall_s"] * rate[m] for m, d in per.items())
        tokens = sum(d["tokens"] for d in per.values())
        out[name] = tokens / baseline if baseline > 0 and tokens > 0 else math.nan
    return out


def covered(by: Sums, large: Iterable[str], quiet_large: Sums | None = None) -> dict[str, float]:
    """Per run, the examples `vs_large`'s ratio is over: those decoded on a machine where some
    large-only run decoded too."""
    rate = large_rates(by, large, quiet_large)
    return {
        name: sum(d["examples"] for m, d in per.items() if m in rate) for name, per in by.items()
    }


def large_rates(
    by: Sums, large: Iterable[str], quiet_large: Sums | None = None
) -> dict[str, float]:
    """Large-only's tokens per second on each machine, pooled as `large_pool` says."""
    rate = {}
    for machine, (_, used) in large_pool(by, large, quiet_large).items():
        tokens, wall = _sums(used)
        if tokens > 0 and wall > 0:
            rate[machine] = tokens / wall
    return rate


def large_pool(
    by: Sums, large: Iterable[str], quiet_large: Sums | None = None
) -> dict[str, tuple[bool, list[tuple[str, Mapping[str, float]]]]]:
    """Per machine, the large-only runs' sums its rate pools (`vs_large`): (True, those of
    `quiet_large`, their sessions recorded quiet) where they hold tokens on that machine, else
    (False, those of `by`, all sessions); each a list of (run, its sums there) in `large`'s
    order."""
    large = list(large)
    out = {}
    for machine in sorted({m for name in large for m in by.get(name, {})}):
        calm = [
            (n, quiet_large[n][machine]) for n in large if machine in (quiet_large or {}).get(n, {})
        ]
        tokens, wall = _sums(calm)
        if tokens > 0 and wall > 0:
            out[machine] = (True, calm)
        else:
            out[machine] = (False, [(n, by[n][machine]) for n in large if machine in by.get(n, {})])
    return out


def _sums(used: list[tuple[str, Mapping[str, float]]]) -> tuple[float, float]:
    return sum(d["tokens"] for _, d in used), sum(d["wall_s"] for _, d in used)


def rate_on(run: Mapping, large: Mapping[str, Mapping], here: str) -> tuple[float, str]:
    """(examples per hour `run` would decode on the machine whose id is `here`, how it was
    found) from manifests: `run`'s, and `large`, the task's large-only runs (its row and its
    speed anchors) by name. How:

    "here"       `run`'s own sessions on that machine
    "scaled"     its sessions elsewhere, at its speed relative to large-only there (`vs_large`)
                 times large-only's speed here, over its tokens per example
    "elsewhere"  its sessions' rate as measured, where large-only has no speed here or there
    "measured"   the same, for sessions that do not say which machine ran them
    ""           no session timed (0 examples per hour)

    The hours are the machine's: a session that reused answers decoded by other runs (`run
    --reuse-answers`) counts its clock (`measured_wall_s`), not the modeled one its throughput
    reports (the reused answers' decoding time added).
    """
    run = {**run, "sessions": [{**s, "wall_s": clock_s(s)} for s in run.get("sessions") or []]}
    me, it = "\0here", "\0run"  # names no run folder has
    labels = session_machines({me: {"sessions": [{"machine": {"id": here}}]}, it: run, **large})
    mine = labels[me][0]
    per = by_machine(run, labels[it])
    own = per.get(mine, {})
    if own.get("wall_s", 0) > 0 and own.get("examples", 0) > 0:
        return 3600 * own["examples"] / own["wall_s"], "here"
    by = {name: by_machine(m, labels[name]) for name, m in large.items()} | {it: per}
    rates = large_rates(by, large)
    if mine in rates:
        measured = [d for m, d in per.items() if m in rates]
        tokens = sum(d["tokens"] for d in measured)
        examples = sum(d["examples"] for d in measured)
        ratio = vs_large(by, large)[it]
        if tokens > 0 and examples > 0 and ratio > 0:
            return ratio * rates[mine] * 3600 * examples / tokens, "scaled"
    wall = sum(d["wall_s"] for d in per.values())
    examples = sum(d["examples"] for d in per.values())
    if wall <= 0 or examples <= 0:
        return 0.0, ""
    known = any(_nodes(s, run) for s in run.get("sessions") or [])
    return 3600 * examples / wall, "elsewhere" if known else "measured"
