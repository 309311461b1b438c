"""benchmarks/check.py: router time over the floor's, against a saved baseline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import check  # noqa: E402  (benchmarks/check.py, a script beside its baselines)

# benchmark name -> (its fastest round, its floor's fastest round), seconds
BASE = {"test_router_overhead[random]": (0.090, 0.100), "[reward]": (0.135, 0.100)}


def write(path: Path, times: dict[str, tuple[float, float]], brand: str = "") -> Path:
    rows = [
        {"name": n, "stats": {"min": t}, "extra_info": {"floor_min_s": f}}
        for n, (t, f) in times.items()
    ]
    info = {"cpu": {"brand_raw": brand}}
    path.write_text(json.dumps({"machine_info": info, "benchmarks": rows}))
    return path


def scaled(times: dict, name: str, factor: float) -> dict:
    t, f = times[name]
    return {**times, name: (factor * t, f)}


@pytest.fixture
def baseline(tmp_path, monkeypatch):
    root = tmp_path / "baselines"
    (root / "Linux").mkdir(parents=True)
    write(root / "Linux" / "0009_tiny-cpu.json", BASE)
    monkeypatch.setattr(check.baseline, "ROOT", root)  # benchmarks/baseline.py's, which check reads
    return "0009"


def test_a_slower_host_is_not_a_regression(tmp_path, baseline, capsys):
    # every timing 1.7x: what CI's slower host showed against a baseline from a faster one
    now = write(tmp_path / "now.json", {n: (1.7 * t, 1.7 * f) for n, (t, f) in BASE.items()})
    assert check.main([str(now), "--baseline", baseline]) == 0
    assert "1.00x" in capsys.readouterr().out


def test_one_router_slowing_against_the_floor_fails(tmp_path, baseline, capsys):
    now = write(tmp_path / "now.json", scaled(BASE, "[reward]", 2.5))
    assert check.main([str(now), "--baseline", baseline]) == 1
    out = capsys.readouterr().out
    assert "2.50x  SLOWER" in out and "regressed more than 2.0x" in out and "[reward]" in out
    # a looser limit lets it through
    assert check.main([str(now), "--baseline", baseline, "--max-slowdown", "3"]) == 0


def test_a_new_router_is_shown_not_judged(tmp_path, baseline, capsys):
    now = write(tmp_path / "now.json", {**BASE, "[fresh]": (1.0, 0.1)})
    assert check.main([str(now), "--baseline", baseline]) == 0
    assert "(new)" in capsys.readouterr().out


def test_no_floor_or_no_baseline_is_a_clear_error(tmp_path, baseline):
    now = tmp_path / "now.json"
    now.write_text(json.dumps({"benchmarks": [{"name": "[reward]", "stats": {"min": 0.1}}]}))
    with pytest.raises(SystemExit, match=r"\[reward\] has no floor_min_s"):
        check.main([str(now), "--baseline", baseline])
    with pytest.raises(SystemExit, match="no saved baseline '0042'"):
        check.main([str(now), "--baseline", "0042"])


def test_pick_takes_the_newest_baseline_of_this_cpu_with_a_floor(tmp_path, monkeypatch):
    import baseline  # benchmarks/baseline.py

    def save(ident: str, brand: str, floor: bool) -> None:
        path = write(tmp_path / "Linux" / f"{ident}_tiny-cpu.json", BASE, brand)
        if not floor:  # a baseline saved before the floor was timed
            path.write_text(path.read_text().replace("floor_min_s", "other"))

    (tmp_path / "Linux").mkdir()
    monkeypatch.setattr(baseline, "ROOT", tmp_path)
    monkeypatch.setattr(baseline.cpuinfo, "get_cpu_info", lambda: {"brand_raw": "AMD EPYC"})
    save("0001", "AMD EPYC", floor=False)  # absolute times only: not comparable as ratios
    assert baseline.pick() == ""
    save("0002", "AMD EPYC", floor=True)
    save("0003", "Intel Xeon", floor=True)
    save("0004", "AMD EPYC", floor=False)
    assert baseline.pick() == "0002"
    # the repository's own pick for this machine, when there is one, is a baseline check.py can use
    monkeypatch.undo()
    if baseline.pick():
        assert check.ratios(check.baseline_path(baseline.pick()))
