"""The public package `hybridbench`: every name imports; a run built, evaluated and read back
in Python on the tiny pair; a RunSpec and its command line are the same run."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import hybridbench as hb
from tests.test_cli import ENV
from tests.tiny import save_tiny_pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_tiny_pair(tmp_path_factory.mktemp("tiny"))


def test_every_public_name_imports_from_its_home():
    import importlib

    for name in hb.__all__:
        value = getattr(hb, name)
        assert getattr(importlib.import_module(hb._HOMES[name]), name) is value, name
    assert {"evaluate", "RunSpec", "RunFolder", "load_engine", "Summary"} <= set(hb.__all__)
    assert {"Router", "Needs", "Decision", "ScoreRouter", "Task"} <= set(hb.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        hb.nope  # noqa: B018


def test_importing_the_package_loads_no_torch():
    code = "import sys, hybridbench; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_a_spec_evaluated_in_python_reads_back_from_its_folder(pair, tmp_path, capsys):
    """What docs/usage.md shows: a RunSpec, one loaded engine, evaluate, RunFolder."""
    spec = hb.RunSpec(
        task="gsm8k",
        router="random",
        router_args={"p": 0.5},
        limit=3,
        max_new_tokens=8,
        out=tmp_path / "run",
        small=pair[0],
        large=pair[1],
        dtype="float32",
        threads=1,
    )
    engine = hb.load_engine(spec)
    summary = hb.evaluate(spec, engine)
    assert isinstance(summary, hb.Summary) and summary.n == 3 and summary.n_failed == 0
    assert 0 <= summary.large_token_share <= 1 and summary.line() in capsys.readouterr().out
    run = hb.RunFolder(spec.out).read()
    assert [r["example_id"] for r in run.records] == list(hb.RunFolder(spec.out).done())
    assert len(run.records) == 3 and run.n_failed == 0
    assert run.manifest["router"] == "random" and run.manifest["router_args"]["p"] == 0.5
    assert hb.RunFolder(spec.out).summary()["n"] == summary.n
    again = hb.evaluate(spec.with_(limit=4), engine)  # resumes: one more example
    assert again.n == 4 and len(hb.RunFolder(spec.out).lines()) == 4


def test_a_spec_and_its_command_line_are_one_run(tmp_path):
    from harness.cli import run as run_command

    parser = argparse.ArgumentParser()
    run_command.configure(parser)
    spec = hb.RunSpec(
        task="gsm8k",
        task_args={"shots": 0},
        router="reward",
        router_args={"threshold": 0.25, "adaptive": True, "checkpoint": "a b/c.pt", "k": 4},
        split="calib",
        split_seed=3,
        limit=7,
        out=tmp_path / "run",
        temperature=0.7,
        top_p=0.9,
        seed=5,
        small="models/small",
        large="http://127.0.0.1:8080",
        dtype="float32",
        threads=2,
        small_backend="llama.cpp",
        n_ctx=2048,
        batch=4,
        reuse_answers="a,b",
    )
    argv = spec.to_argv()
    assert argv[0] == "run" and "--batch" in argv and "--max-new-tokens" not in argv
    assert hb.RunSpec.from_args(parser.parse_args(list(argv[1:]))) == spec
    plain = hb.RunSpec(task="gsm8k", router="small", out=str(tmp_path))
    assert plain.to_argv() == (
        "run",
        "--task",
        "gsm8k",
        "--router",
        "small",
        "--out",
        str(tmp_path),
    )
    assert hb.RunSpec.from_args(parser.parse_args(list(plain.to_argv()[1:]))) == plain
    with pytest.raises(hb.UserError, match="--limit must be >= 0"):
        hb.RunSpec(task="gsm8k", router="small", out="x", limit=-1)


def test_every_recorded_row_of_the_edition_reads_as_a_spec_and_back():
    """The command lines a sweep recorded for the published edition (what `hybridbench rerun`
    runs again) parse into a RunSpec, whose own command line is the same run."""
    import json
    from pathlib import Path

    from harness.cli import run as run_command

    parser = argparse.ArgumentParser()
    run_command.configure(parser)
    states = sorted((Path(__file__).parents[1] / "results" / "edition2").glob("*/sweep.json"))
    rows = [r for s in states for r in json.loads(s.read_text())["runs"].values()]
    assert len(rows) > 30
    for row in rows:
        spec = hb.RunSpec.from_args(parser.parse_args(row["argv"][1:]))
        assert spec.out.endswith(row["name"]) and spec.task in row["argv"]
        assert hb.RunSpec.from_args(parser.parse_args(list(spec.to_argv()[1:]))) == spec
