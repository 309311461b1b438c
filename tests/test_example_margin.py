"""The example plugin package (examples/margin-router), installed with pip, end to end on the tiny
pair through the command line: its router and task listed, calibrate, run, sweep, report.

CI installs the package first (.ci/run: `pip install -e examples/margin-router`); without it
installed there is nothing to test here, and the test says so as its skip reason.
"""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from harness.cli.main import main
from tests.tiny import save_tiny_pair

PACKAGE = "hybridbench-margin-router"


def installed() -> str:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return ""


pytestmark = pytest.mark.skipif(
    not installed(), reason=f"{PACKAGE} is not installed (pip install -e examples/margin-router)"
)


def test_the_example_package_runs_end_to_end(tmp_path, capsys):
    small, large = save_tiny_pair(tmp_path / "pair")
    pair = ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]
    budget = ["--max-new-tokens", "8"]

    assert main(["routers"]) == 0 and main(["tasks"]) == 0
    listed = capsys.readouterr().out
    assert f"margin        entry point of {PACKAGE} {installed()}" in listed
    assert "arith" in listed and "margin_router.task:Arith" in listed

    cal = tmp_path / "margin.json"
    argv = ["calibrate", "--router", "margin", "--task", "arith", "--limit", "5", *budget,
            "--out", str(cal), *pair]  # fmt: skip
    assert main(argv) == 0
    c = json.loads(cal.read_text())
    assert c["router"] == "margin" and c["router_class"] == "margin_router.router:MarginRouter"
    assert c["router_version"] == installed() and len(c["example_ids"]) == 5

    run = tmp_path / "run"
    argv = ["run", "--task", "arith", "--router", "margin", "--router-arg", "target_share=0.3",
            "--router-arg", f"calibration={cal}", "--limit", "4", *budget, "--out", str(run),
            *pair]  # fmt: skip
    assert main(argv) == 0
    m = json.loads((run / "manifest.json").read_text())
    assert m["plugins"]["router"] == {"class": "margin_router.router:MarginRouter",
                                      "origin": "entry point", "package": PACKAGE,
                                      "version": installed()}  # fmt: skip
    assert m["plugins"]["task"]["class"] == "margin_router.task:Arith"
    assert json.loads((run / "summary.json").read_text())["n"] == 4

    sweep = tmp_path / "sweep"
    argv = ["sweep", "--task", "arith", "--routers", "small,large,random,margin", "--targets",
            "0.2,0.5", "--router-arg", f"margin:calibration={cal}", "--limit", "4", *budget,
            "--out", str(sweep), *pair]  # fmt: skip
    assert main(argv) == 0
    runs = sorted(p.name for p in sweep.iterdir() if (p / "summary.json").is_file())
    assert "margin__target_share=0.2" in runs and "margin__target_share=0.5" in runs
    assert main(["report", str(sweep)]) == 0
    board = (sweep / "report" / "leaderboard.md").read_text()
    assert "arith" in board and "| margin |" in board
