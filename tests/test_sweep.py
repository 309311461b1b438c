"""`hybridbench sweep` and `hybridbench report` end to end on the tiny pair saved to disk:
one run folder per (router, setting), resume by skipping, failed runs, the Ray executor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import routers
from harness.cli import sweep as sweep_command
from harness.cli.main import main
from harness.core.router import TokenRouter
from harness.errors import UserError
from harness.evaluation import sweep
from tests.tiny import save_tiny_pair

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "PYTHONPATH": str(ROOT),
}
RUNS = {"small__default", "large__default", "random__p=0.2", "random__p=0.6", "oracle__default"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_tiny_pair(tmp_path_factory.mktemp("tiny"))


def sweep_argv(pair, out, routers_="small,large,random,oracle", *extra):
    return [
        "sweep", "--task", "gsm8k", "--routers", routers_, "--targets", "0.2,0.6",
        "--limit", "2", "--max-new-tokens", "12", "--out", str(out),
        "--small", pair[0], "--large", pair[1], "--dtype", "float32", "--threads", "1", *extra,
    ]  # fmt: skip


def cli(*argv, env=ENV, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_local_sweep_runs_each_setting_resumes_and_reports(pair, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(sweep_argv(pair, out)) == 0
    printed = capsys.readouterr().out
    assert "[5/5]" in printed and "5 ran, 0 skipped, 0 failed" in printed

    runs = {p.name for p in out.iterdir() if (p / "manifest.json").is_file()}
    assert runs == RUNS
    for name in RUNS:
        lines = (out / name / "records.jsonl").read_text().splitlines()
        assert len(lines) == 2 and all(not json.loads(x)["error"] for x in lines)
        summary = json.loads((out / name / "summary.json").read_text())
        assert summary["n"] == 2 and summary["n_failed"] == 0
    manifest = json.loads((out / "random__p=0.6" / "manifest.json").read_text())
    assert manifest["router"] == "random" and manifest["router_args"]["p"] == 0.6
    assert manifest["limit"] == 2 and manifest["decode"]["max_new_tokens"] == 12
    share = {
        n: json.loads((out / n / "summary.json").read_text())["large_token_share"] for n in RUNS
    }
    assert share["small__default"] == 0.0 and share["large__default"] == 1.0
    assert 0.0 < share["random__p=0.2"] < share["random__p=0.6"] < 1.0  # 24 tokens: seeded draws

    before = {n: files(out / n) for n in RUNS}
    assert main(sweep_argv(pair, out)) == 0
    assert "0 ran, 5 skipped, 0 failed" in capsys.readouterr().out
    assert {n: files(out / n) for n in RUNS} == before  # skipped: not even the summary rewritten

    # report through the CLI: leaderboard files, byte for byte the same on a second run
    done = cli("report", str(out))
    assert done.returncode == 0, done.stderr
    report = out / "report"
    assert done.stdout.split() == [str(report / "leaderboard.md"), str(report / "leaderboard.html")]
    md = (report / "leaderboard.md").read_text()
    assert all(name in md for name in RUNS)
    assert "<img" in (report / "leaderboard.html").read_text()
    first = files(report)
    assert cli("report", str(out), "--out", str(report)).returncode == 0
    assert files(report) == first


class Boom(TokenRouter):
    """A router whose every decision raises: its runs fail, the sweep's other runs must not."""

    name = "boom"

    def __init__(self, level: float = 0.0):
        self.level = level

    @classmethod
    def sweep_settings(cls, targets, fixed=None):
        return [{"level": t} for t in targets]

    def defer_mask(self, view) -> torch.Tensor:
        raise RuntimeError("boom")


def test_failed_runs_are_reported_and_the_others_complete(pair, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(routers.ROUTERS, "boom", "tests.test_sweep:Boom")
    out = tmp_path / "sweep"
    assert main(sweep_argv(pair, out, "boom,small")) == 1
    captured = capsys.readouterr()
    assert "1 ran, 0 skipped, 2 failed" in captured.out
    assert "failed: boom__level=0.2" in captured.err and "failed: boom__level=0.6" in captured.err
    assert json.loads((out / "small__default" / "summary.json").read_text())["n"] == 2
    state = json.loads((out / "sweep.json").read_text())["runs"]
    assert (
        state["boom__level=0.6"]["returncode"] == 1 and state["small__default"]["returncode"] == 0
    )
    # a second sweep skips the finished run and tries the failed ones again
    assert main(sweep_argv(pair, out, "boom,small")) == 1
    assert "0 ran, 1 skipped, 2 failed" in capsys.readouterr().out


def test_settings_come_from_the_router_class():
    assert sweep.router_settings("small", [0.1, 0.5]) == [{}]
    assert sweep.router_settings("speculative", [0.1], {"k": 8}) == [{"k": 8}]
    assert sweep.router_settings("random", [0.1, 0.5]) == [{"p": 0.1}, {"p": 0.5}]
    grid = [{"threshold": t} for t in routers.router_class("entropy").SWEEP_THRESHOLDS]
    assert sweep.router_settings("entropy", [0.1]) == grid
    assert sweep.setting_name({}) == "default"
    assert sweep.setting_name({"p": 0.1, "k": 4}) == "k=4_p=0.1"
    assert sweep.setting_name({"calibration": "a/b c.json"}) == "calibration=a-b-c.json"


def test_a_fixed_argument_that_is_swept_pins_the_router_to_one_run(pair, tmp_path):
    import argparse

    sub = argparse.ArgumentParser(prog="sweep")
    sweep_command.configure(sub)
    argv = sweep_argv(pair, tmp_path, "random,entropy")[1:]
    argv += ["--router-arg", "entropy:threshold=0.5"]
    jobs = sweep.plan_rows(sweep_command.spec_of(sub.parse_args(argv)), tmp_path)
    assert [j.name for j in jobs] == ["random__p=0.2", "random__p=0.6", "entropy__threshold=0.5"]
    assert jobs[-1].setting == {"threshold": 0.5}


def test_a_router_without_settings_is_named_by_its_fixed_arguments(pair, tmp_path):
    """Speculative at k = 4 and adaptive into one sweep folder: two runs, not one resumed."""
    import argparse

    sub = argparse.ArgumentParser(prog="sweep")
    sweep_command.configure(sub)
    plain = sweep.plan_rows(
        sweep_command.spec_of(sub.parse_args(sweep_argv(pair, tmp_path, "speculative")[1:])),
        tmp_path,
    )
    argv = sweep_argv(pair, tmp_path, "speculative")[1:]
    args = sub.parse_args(argv + ["--router-arg", "speculative:adaptive=true"])
    adaptive = sweep.plan_rows(sweep_command.spec_of(args), tmp_path)
    assert [j.name for j in plain] == ["speculative__default"]
    assert [j.name for j in adaptive] == ["speculative__adaptive=true"]
    assert adaptive[0].setting == {"adaptive": True}


def test_target_settings_of_the_trained_routers():
    assert sweep.router_settings("reward", [0.1, 0.3]) == [
        {"target_share": 0.1}, {"target_share": 0.3},
    ]  # fmt: skip
    assert sweep.router_settings("query", [0.3]) == [{"share": 0.3}]
    assert sweep.router_settings("random_query", [0.3]) == [{"p": 0.3}]


def test_run_command_lines_read_back_to_the_same_run(pair, tmp_path):
    """Each planned command line, parsed by `run`'s own parser, names the intended run."""
    import argparse

    from harness.cli import run as run_command

    parser = argparse.ArgumentParser()
    sub = argparse.ArgumentParser(prog="sweep")
    sweep_command.configure(sub)
    args = sub.parse_args(sweep_argv(pair, tmp_path, "random,confidence")[1:])
    run_command.configure(parser)
    jobs = sweep.plan_rows(sweep_command.spec_of(args), tmp_path)
    assert len(jobs) == 2 + len(routers.router_class("confidence").SWEEP_THRESHOLDS)
    for job in jobs:
        run = parser.parse_args(list(job.argv[1:]))
        assert (run.router, run.limit, run.max_new_tokens, run.dtype) == (
            job.router, 2, 12, "float32",
        )  # fmt: skip
        assert routers.parse_args(run.router_arg) == job.setting
        assert Path(run.out) == tmp_path / job.name and Path(run.small).is_absolute()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--routers", "small,nope"], "unknown router 'nope'"),
        (["--targets", "0.2,1.5"], "--targets must be numbers in [0, 1]"),
        (["--targets", "a"], "--targets must be comma-separated numbers"),
        (["--router-arg", "p=0.3"], "not of the form ROUTER:K=V"),
        (["--router-arg", "large:p=0.3"], "not one of --routers"),
        (["--router-arg", "random:nope=1"], "has no argument nope"),
        (["--jobs", "0"], "--jobs must be >= 1"),
    ],
)
def test_user_mistakes_are_one_line_errors(pair, tmp_path, capsys, extra, message):
    argv = sweep_argv(pair, tmp_path / "x", "random")
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not any((tmp_path / "x").glob("*/manifest.json"))  # nothing ran


def test_parse_targets():
    assert sweep.parse_targets("0.1, 0.3,") == [0.1, 0.3]
    with pytest.raises(UserError):
        sweep.parse_targets("")


def test_ray_executor_runs_each_run_as_a_ray_task(pair, tmp_path, monkeypatch):
    # Keep the test's Ray instance on loopback: with this set, Ray on Linux binds to 127.0.0.1
    # rather than the machine's network address. It must be set before ray is imported.
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # Ray workers inherit it: they import harness
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # Ray's default for a new cluster, made explicit
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'hybridbench[ray]')")
    ctx = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        address = ctx.address_info["gcs_address"]
        assert address.startswith("127.0.0.1:")
        out = tmp_path / "sweep"
        argv = sweep_argv(pair, out, "small,large", "--executor", "ray", "--ray-address", address)
        # A driver connecting to a token-auth cluster by address needs RAY_AUTH_MODE=token.
        env = {**ENV, **os.environ}
        # generous: Ray's worker processes import torch; on 2 cores shared with a real-model job
        # (and a build) it took 178 s of its old 180 s limit once and timed out once
        done = cli(*argv, env=env, timeout=480)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 ran, 0 skipped, 0 failed" in done.stdout
        for name, share in (("small__default", 0.0), ("large__default", 1.0)):
            summary = json.loads((out / name / "summary.json").read_text())
            assert summary["n"] == 2 and summary["large_token_share"] == share
            assert "n=2" in (out / "logs" / f"{name}.log").read_text()  # the worker's output
        again = cli(*argv, env=env, timeout=480)
        assert again.returncode == 0 and "0 ran, 2 skipped" in again.stdout
    finally:
        ray.shutdown()


def test_local_process_pool(pair, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(sweep_argv(pair, out, "small,large", "--jobs", "2")) == 0
    assert "2 ran, 0 skipped, 0 failed" in capsys.readouterr().out
    for name, share in (("small__default", 0.0), ("large__default", 1.0)):
        summary = json.loads((out / name / "summary.json").read_text())
        assert summary["n"] == 2 and summary["large_token_share"] == share
        assert "n=2" in (out / "logs" / f"{name}.log").read_text()  # the pool process's output


def test_rows_run_again_and_compared_with_their_originals(pair, tmp_path):
    """`hybridbench rerun`: a row decoded again from its recorded command line gives the
    same answers, so compare flags nothing; a row the sweep does not hold is a clear error."""
    out, again = tmp_path / "sweep", tmp_path / "again"
    assert main(sweep_argv(pair, out, "random")) == 0
    script = [sys.executable, "-m", "harness.cli.main", "rerun", str(out)]
    # timings of a 2-example tiny run vary more than any real slowdown rule allows
    done = subprocess.run(
        [*script, "--rows", "random__p=0.6", "--out", str(again), "--max-slowdown", "1000"],
        capture_output=True, text=True, env=ENV, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rows run again: 0 flagged" in done.stdout
    old = (out / "random__p=0.6" / "records.jsonl").read_text().splitlines()
    new = (again / "random__p=0.6" / "records.jsonl").read_text().splitlines()
    assert [json.loads(x)["completion"] for x in new] == [json.loads(x)["completion"] for x in old]
    verdict = json.loads((again / "compare.json").read_text())["random__p=0.6"]
    assert verdict["n_paired"] == 2 and verdict["flags"] == []
    assert verdict["diff_ci"] == [0.0, 0.0]

    missing = subprocess.run(
        [*script, "--rows", "entropy__p=1", "--out", str(again)],
        capture_output=True, text=True, env=ENV, timeout=60,
    )  # fmt: skip
    assert missing.returncode != 0 and "has no row 'entropy__p=1'" in missing.stderr


def test_rescore_recomputes_stored_scores_and_the_summary(pair, tmp_path):
    """`hybridbench rescore`: scores come back from the stored completions alone; the old records
    are kept; the summary follows."""
    out = tmp_path / "run"
    argv = ["run", "--task", "gsm8k", "--router", "small", "--limit", "2", "--max-new-tokens", "12",
            "--small", pair[0], "--large", pair[1], "--dtype", "float32", "--threads", "1",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    records = out / "records.jsonl"
    original = [json.loads(x) for x in records.read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    tampered = [{**r, "scores": {**r["scores"], "exact_match": 1.0}} for r in original]
    records.write_text("".join(json.dumps(r) + "\n" for r in tampered))
    (out / "summary.json").write_text(json.dumps({**summary, "quality": 1.0}))
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "rescore", str(out)],
        capture_output=True, text=True, env=ENV, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "exact_match 1.0000 -> " in done.stdout
    assert [json.loads(x) for x in records.read_text().splitlines()] == original
    assert json.loads((out / "summary.json").read_text())["quality"] == summary["quality"]
    (kept,) = out.glob("records.jsonl.before-rescore-*")
    assert [json.loads(x) for x in kept.read_text().splitlines()] == tampered
    again = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "rescore", str(out)],
        capture_output=True, text=True, env=ENV, timeout=120,
    )  # fmt: skip
    assert again.returncode == 0 and "0 of 2 records rescored differently" in again.stdout
    assert list(out.glob("records.jsonl.before-rescore-*")) == [kept]  # no copy of the same


def test_a_sweep_built_in_python_records_the_command_lines_a_shell_sweep_records(tmp_path):
    """A `SweepSpec` plans the rows its command line plans, each recorded `run` line option for
    option as sweep.json has always held it (a changed line would rerun a finished row)."""
    import argparse

    argv = ["--task", "gsm8k", "--routers", "random,speculative", "--targets", "0.3"]
    argv += ["--limit", "2", "--out", str(tmp_path), "--threads", "1"]
    argv += ["--router-arg", "speculative:k=4"]
    parser = argparse.ArgumentParser(prog="sweep")
    sweep_command.configure(parser)
    spec = sweep.SweepSpec(
        task="gsm8k",
        routers=("random", "speculative"),
        out=str(tmp_path),
        targets=(0.3,),
        router_args={"speculative": {"k": 4}},
        limit=2,
        models=sweep_command.ModelSpec(threads=1, batch="auto"),
    )
    assert spec == sweep_command.spec_of(parser.parse_args(argv))
    rows = sweep.plan_rows(spec, tmp_path)
    assert [r.name for r in rows] == ["random__p=0.3", "speculative__k=4"]
    out = tmp_path / "random__p=0.3"
    assert " ".join(rows[0].argv) == (
        f"run --task gsm8k --router random --out {out} --split test --split-seed 0 "
        "--router-arg p=0.3 --limit 2 --temperature 0.0 --top-p 1.0 "
        "--seed 0 --dtype bfloat16 --small-device auto --large-device auto --threads 1 "
        "--backend auto --batch auto"
    )
    assert "--router-arg k=4" in " ".join(rows[1].argv)
