"""harness.metrics.machines: sessions told apart by machine (recorded id, shared batch probe), and
throughput relative to large-only's on the same machine; the report and compare use them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.metrics.machines import by_machine, covered, session_machines, vs_large

PROBE_A = {"measured": "2026-11-23T17:43:55+0000", "threads": 2,
           "step_seconds": {"large": {"1": 0.037, "16": 0.303}}}  # fmt: skip
PROBE_B = {"measured": "2026-11-24T18:50:07+0000", "threads": 2,
           "step_seconds": {"large": {"1": 0.068, "16": 0.678}}}  # fmt: skip
PROBE_B_SPEC = {**PROBE_B, "measured": "2026-11-24T19:30:31+0000", "shape": {"large": [1, 5]}}
BRAND = {"cpu": "AMD EPYC", "cpus": 2}


def session(started, tokens, wall, examples=16, probe=None, mid=None, batch=16):
    machine = {**BRAND, **({"id": mid} if mid else {})}
    s = {"batch": batch, "started": started, "examples": examples, "tokens": tokens,
         "wall_s": wall, "machine": machine}  # fmt: skip
    return {**s, "batch_probe": probe} if probe else s


def the_sweep():
    """gsm8k as the published edition ran it: small and most of large on machine A (no ids yet), the rest of
    large and speculative's first sessions on B before ids were recorded, then speculative's
    last session and a speed anchor on B with B's id."""
    return {
        "small": {"sessions": [session("2026-11-24T16:47", 8000, 100.0, 200, PROBE_A)]},
        "large": {"sessions": [session("2026-11-24T17:00", 4000, 100.0, 158, PROBE_A),
                               session("2026-11-24T18:50", 1300, 100.0, 42, PROBE_B)]},
        "speculative": {"sessions": [
            session("2026-11-24T19:30", 600, 50.0, 33, PROBE_B_SPEC),
            session("2026-11-24T20:54", 600, 50.0, 33, PROBE_B_SPEC, mid="ab0be9c69195")]},
        "anchor": {"sessions": [session("2026-11-24T21:10", 1300, 100.0, 48, PROBE_B,
                                        mid="ab0be9c69195")]},
    }  # fmt: skip


def test_sessions_are_tied_by_id_and_by_a_shared_probe():
    labels = session_machines(the_sweep())
    assert labels == {"small": ["A"], "large": ["A", "B"], "speculative": ["B", "B"],
                      "anchor": ["B"]}  # fmt: skip
    # without the anchor, nothing yet ties large's second session to B's id: two machines
    # under one brand and one kernel would otherwise be one
    sweep = the_sweep()
    del sweep["anchor"]
    assert session_machines(sweep)["speculative"] == ["C", "C"]
    # sessions with neither id nor probe: one machine when described alike, else apart
    plain = {"x": {"sessions": [{"machine": BRAND}, {"machine": {**BRAND, "cpus": 4}}, {}]},
             "y": {"machine": BRAND, "sessions": [{}]}}  # fmt: skip
    assert session_machines(plain) == {"x": ["A", "B", "C"], "y": ["A"]}


def test_throughput_relative_to_large_only_on_the_same_machine():
    sweep = the_sweep()
    labels = session_machines(sweep)
    by = {name: by_machine(m, labels[name]) for name, m in sweep.items()}
    assert by["large"] == {
        "A": {"tokens": 4000.0, "wall_s": 100.0, "examples": 158.0, "contended": 0.0},
        "B": {"tokens": 1300.0, "wall_s": 100.0, "examples": 42.0, "contended": 0.0}}  # fmt: skip
    ratio = vs_large(by, ["large", "anchor"])
    assert ratio["small"] == pytest.approx(80.0 / 40.0)  # A only: 80 tok/s vs large's 40 there
    assert ratio["speculative"] == pytest.approx(12.0 / 13.0)  # B only: vs 13 tok/s there
    # a run on both machines: its tokens over what large would emit in its time on each
    assert ratio["large"] == pytest.approx(5300 / (100 * 40 + 100 * 13))
    without_b = vs_large(by, ["large"]) | vs_large({"speculative": by["speculative"]}, [])
    assert math.isnan(without_b["speculative"])  # large-only never ran there (as B's id)
    assert math.isnan(vs_large({"none": {}}, ["none"])["none"])
    assert covered(by, ["large", "anchor"])["speculative"] == 66.0


def test_a_machine_without_large_only_is_left_out_of_the_ratio_and_said_so():
    """A run resumed on a machine that was gone before any large-only ran there (gsm8k citer 0.1:
    44 of its examples): the ratio is over its examples on the other machines, and the
    leaderboard cell says how many examples that is."""
    from reports.leaderboard import _speed_cell

    sweep = the_sweep()
    sweep["citer"] = {"sessions": [
        session("2026-11-25T17:44", 800, 20.0, 32, PROBE_A),  # A: 40 tok/s, large's rate there
        session("2026-11-25T18:28", 900, 60.0, 44, mid="0f1ae66ef2d3")]}  # fmt: skip
    labels = session_machines(sweep)
    by = {name: by_machine(m, labels[name]) for name, m in sweep.items()}
    assert set(by["citer"]) == {"A", "C"}
    assert vs_large(by, ["large", "anchor"])["citer"] == pytest.approx(1.0)  # A alone
    assert covered(by, ["large", "anchor"])["citer"] == 32.0
    row = {"vs_large": 1.0, "vs_large_examples": 32.0, "speed_examples": 76.0}
    assert _speed_cell(row) == "1.00 (over 32 of 76 examples)"
    assert _speed_cell({**row, "vs_large_examples": 76.0}) == "1.00"
    only_c = {"c": {"C": by["citer"]["C"]}, **{k: by[k] for k in ("large", "anchor")}}
    assert math.isnan(vs_large(only_c, ["large", "anchor"])["c"])


def test_large_only_sessions_recorded_quiet_are_the_denominator_where_there_are_some():
    """Sessions record the CPU other processes used meanwhile (`others_cores`); on a machine
    where some large-only session was recorded quiet, those alone give large-only's rate, and
    a run with a session recorded busy is counted as contended."""
    sweep = the_sweep()
    sweep["anchor"]["sessions"][0]["others_cores"] = 0.02  # quiet: 13 tok/s
    sweep["anchor"]["sessions"].append(  # busy: 5 tok/s, left out of the denominator
        session("2026-11-24T22:00", 500, 100.0, 48, PROBE_B, mid="ab0be9c69195") | {
            "others_cores": 0.9})  # fmt: skip
    sweep["speculative"]["sessions"][1]["others_cores"] = 1.0
    labels = session_machines(sweep)
    by = {name: by_machine(m, labels[name]) for name, m in sweep.items()}
    calm = {name: by_machine(m, labels[name], quiet_only=True) for name, m in sweep.items()}
    assert calm["anchor"] == {"B": {"tokens": 1300.0, "wall_s": 100.0, "examples": 48.0,
                                    "contended": 0.0}} and calm["large"] == {}  # fmt: skip
    assert by["speculative"]["B"]["contended"] == 1.0 and by["anchor"]["B"]["contended"] == 1.0
    ratio = vs_large(by, ["large", "anchor"], calm)
    assert ratio["speculative"] == pytest.approx(12.0 / 13.0)  # B: the quiet anchor alone
    assert ratio["small"] == pytest.approx(2.0)  # A: none recorded quiet, all of large's there
    pooled = vs_large(by, ["large", "anchor"])  # without the preference: 3100 tok / 300 s on B
    assert pooled["speculative"] == pytest.approx(12.0 / (3100 / 300))


def write_run(folder: Path, router: str, sessions: list[dict], scores: list[float]) -> Path:
    folder.mkdir(parents=True)
    manifest = {"task": "gsm8k", "split": "test", "metric": "exact_match", "router": router,
                "router_args": {}, "sessions": sessions}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))
    gen = {"provenance": [1 if router == "large" else 0] * 4,
           "steps": {"seconds": [0.1] * 4, "large_called": [router == "large"] * 4}}  # fmt: skip
    lines = [json.dumps({"example_id": f"ex{i}", "scores": {"exact_match": s}, "error": "",
                         "generation": gen}) for i, s in enumerate(scores)]  # fmt: skip
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_report_divides_by_large_only_on_each_machine_and_lists_the_anchor(tmp_path):
    """The report's runs, goal and speed tables give throughput / large-only on the same
    machine; a task folder's anchors/ pool into large-only's rate on their machine and are
    listed in their own table, not as runs; the setup table names the machines A, B."""
    from reports import write_report

    sweep, task = the_sweep(), tmp_path / "edition" / "gsm8k"
    for name in ("small", "large", "speculative"):
        write_run(task / f"{name}__default", name, sweep[name]["sessions"], [1.0, 0.0] * 4)
    md_path = write_report(task, tmp_path / "before").parent / "leaderboard.md"
    before = md_path.read_text()
    write_run(task / "anchors" / "ab0be9c69195", "large", sweep["anchor"]["sessions"], [1.0] * 4)
    md = (write_report(task, tmp_path / "after").parent / "leaderboard.md").read_text()

    def cells(text, section, first):
        table = text.split(f"### {section}")[1].split("###")[0]
        line = next(x for x in table.splitlines() if x.startswith(f"| {first} |"))
        return [c.strip() for c in line.strip("|").split("|")]

    # before the anchor, speculative's machine (B by id) has no large-only session known
    assert cells(before, "Throughput (measured)", "speculative")[6] == "—"
    assert cells(md, "Throughput (measured)", "small")[6] == "2.00"
    assert cells(md, "Throughput (measured)", "large")[6] == "1.00"  # by definition
    speed = cells(md, "Throughput (measured)", "speculative")
    assert speed[3] == "B 66" and speed[6] == f"{12 / 13:.2f}"
    assert cells(md, "Large-only on each machine", "A")[1:] == [
        "large__default (158)",
        "all (none recorded quiet)",
        "158",
        "4000",
        "100",
        "40.00",
    ]
    assert cells(md, "Large-only on each machine", "B")[1:] == [
        "anchors/ab0be9c69195 (48); large__default (42)", "all (none recorded quiet)", "90",
        "2600", "200", "13.00"]  # fmt: skip
    machines = cells(md, "Setup", "machines")[1]
    assert machines.startswith("A: AMD EPYC, 2 CPUs, probe 2026-11-23: large's 16-sequence step "
                               "0.303 s (others' CPU meanwhile: not recorded)")  # fmt: skip
    assert "; B: id ab0be9c69195, AMD EPYC" in machines and "C:" not in machines
    runs = md.split("### Runs")[1].split("###")[0]
    assert runs.count("| large |") == 1  # the anchor is not a run of the leaderboard


def test_compare_flags_a_slowdown_only_on_one_machine(tmp_path, capsys):
    from harness.cli.main import main

    fast = [session("2026-11-24T17:00", 4000, 100.0, 8, PROBE_A)]
    slow_a = [session("2026-11-24T18:00", 2000, 100.0, 8, PROBE_A)]
    slow_b = [session("2026-11-24T19:00", 2000, 100.0, 8, PROBE_B, mid="ab0be9c69195")]
    old = write_run(tmp_path / "old", "random", fast, [1.0] * 8)
    same = write_run(tmp_path / "same", "random", slow_a, [1.0] * 8)
    other = write_run(tmp_path / "other", "random", slow_b, [1.0] * 8)
    assert main(["compare", str(old), str(same)]) == 1
    assert "REGRESSION speed: 40 -> 20 tok/s" in capsys.readouterr().out
    assert main(["compare", str(old), str(other), "--json", str(tmp_path / "v.json")]) == 0
    out = capsys.readouterr().out
    assert "note: different machines, speeds are not comparable (no speed flag)" in out
    # each run's examples by the machine that decoded them (an id where one was recorded)
    assert "(no speed flag): old on machine A (8 examples); new on ab0be9c69195 (8 examples)" in out
    assert "slowdown 2x" in out and "no regression flagged" in out
    assert json.loads((tmp_path / "v.json").read_text())["same_machine"] is False


def test_a_run_with_nothing_decoded_yet_has_no_rates(tmp_path):
    """A row the chain has just started (a session, no example) reads "—" where a rate would
    be, not 0 tok/s: 0 is a measurement, and nothing was measured; nor is it paired."""
    from reports import write_report

    sweep, task = the_sweep(), tmp_path / "edition" / "gsm8k"
    for name in ("small", "large"):
        write_run(task / f"{name}__default", name, sweep[name]["sessions"], [1.0, 0.0] * 4)
    started = session("2026-11-25T01:16:50", 0, 26.0, examples=0, mid="ab0be9c69195")
    write_run(task / "random__p=0.35", "random", [started], [])
    write_run(task / "entropy__target_share=0.2", "entropy", [started], [])
    md = (write_report(task, tmp_path / "out").parent / "leaderboard.md").read_text()
    table = md.split("### Throughput (measured)")[1].split("###")[0]
    row = next(x for x in table.splitlines() if x.startswith("| random |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3].endswith(" 0") and cells[4:] == ["—"] * 7
    # nor is it paired with a control (it has no share yet: it was paired with large, "1.000
    # (not matched)", the nearest to nothing)
    table = md.split("### Paired vs control at the same share")[1].split("###")[0]
    row = next(x for x in table.splitlines() if x.startswith("| entropy |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:6] == ["—", "nothing decoded yet", "—", "0"]
    assert cells[6:] == ["—"] * len(cells[6:]) and len(cells[6:]) >= 2  # no test, no verdict
    routers = md.split("### Routers")[1].split("###")[0]
    # settings measured so far: none; and no curve metrics (an empty curve read as the random
    # line: APGR 0.500, CPT 50% / 80%, in a reward row the chain had just started)
    assert "| random | 0 | — | — | — | — | — |" in routers
    runs = md.split("### Runs")[1].split("###")[0]
    row = next(x for x in runs.splitlines() if x.startswith("| random |"))
    assert [c.strip() for c in row.strip("|").split("|")][6:8] == ["—", "—"]  # its APGRs
