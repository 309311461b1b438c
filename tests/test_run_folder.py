"""The run folder (harness/core/run_folder.py): one damage policy, one writer, clean failures.

Two runs into one folder (the second refused, naming the first), a lock left by a killed run
taken over, a full disk simulated mid-run (one line, nothing lost, the folder resumes), a report
over runs that scored nothing, and the summary line without NaN."""

from __future__ import annotations

import errno
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from harness.cli.main import main
from harness.core import run_folder
from harness.core.router import Needs, Router
from harness.core.run_folder import RunFolder
from harness.errors import UserError
from tests.test_cli import ENV, run_args
from tests.tiny import save_tiny_pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_tiny_pair(tmp_path_factory.mktemp("tiny"))


def _rec(i: int, error: str = "") -> dict:
    return {"example_id": f"q{i}", "scores": {"m": 1.0}, "error": error}


def test_a_cut_last_line_is_dropped_and_a_damaged_middle_line_is_an_error(tmp_path):
    folder = RunFolder(tmp_path)
    lines = [json.dumps(_rec(0)), json.dumps(_rec(1, "boom")), json.dumps(_rec(1))]
    folder.records_path.write_text("\n".join(lines) + "\n" + json.dumps(_rec(2))[:9])
    assert [r["example_id"] for r in folder.lines()] == ["q0", "q1", "q1"]
    assert list(folder.done()) == ["q0", "q1"] and folder.failed() == []
    assert folder.repair().keys() == {"q0", "q1"}  # the file now holds one line per example
    assert len(folder.records_path.read_text().splitlines()) == 2
    folder.records_path.write_text("{not json\n" + json.dumps(_rec(0)) + "\n")
    with pytest.raises(UserError, match=r"records.jsonl:1 is a damaged record"):
        folder.lines()


def test_compressed_records_read_as_plain_ones(tmp_path):
    plain, packed = RunFolder(tmp_path / "a"), RunFolder(tmp_path / "b")
    plain.path.mkdir()
    plain.write_manifest({"task": "t"})
    plain.write_records([_rec(0), _rec(1, "boom")])
    plain.publish_to(packed.path)
    assert gzip.decompress((packed.path / run_folder.RECORDS_GZ).read_bytes())
    assert packed.lines() == plain.lines() and packed.read().n_failed == 1
    with pytest.raises(UserError, match="not a run folder"):
        RunFolder(tmp_path / "none").read()


def test_a_second_writer_is_refused_naming_the_first(tmp_path):
    folder = RunFolder(tmp_path / "run")
    with folder.lock() as me:
        with pytest.raises(UserError) as e:
            with folder.lock():
                pass
        assert me.pid == os.getpid() and me.host == socket.gethostname()
        text = str(e.value)
        assert f"process {os.getpid()} on {socket.gethostname()} since {me.since}" in text
        assert "\n" not in text
    assert folder.holder() is None  # released: the lock file goes with it
    with folder.lock():
        pass


def _dead_holder(folder: RunFolder) -> subprocess.Popen:
    """A process that took `folder`'s lock, killed outright (no clean-up: the lock file stays,
    its flock goes with the process)."""
    code = "import sys, time; from harness.core.run_folder import RunFolder\n"
    code += "with RunFolder(sys.argv[1]).lock():\n    print('held', flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(folder.path)], env=ENV, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(UserError, match=f"process {proc.pid} on "):
        with folder.lock():
            pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc


def test_a_lock_left_by_a_process_that_ended_is_taken_over(tmp_path):
    folder = RunFolder(tmp_path / "run")
    proc = _dead_holder(folder)
    dead = folder.holder()
    assert dead.pid == proc.pid and dead.host == socket.gethostname()
    said = []
    with folder.lock(say=said.append) as me:
        assert folder.holder() == me
    assert said == [f"{folder.path}: took over the lock left by {dead.text()}, which has ended"]


def test_two_runs_into_one_folder_the_second_is_refused(pair, tmp_path, capsys):
    """A run decoding in another process holds the folder: a second `hybridbench run` into it
    ends at once with one line naming it and exit 2; the first finishes with every example once
    and its session recorded."""
    out = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, "-m", "harness.cli.main", *run_args(pair, out, limit=10)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    records = out / run_folder.RECORDS
    deadline = time.time() + 600
    while time.time() < deadline and not (records.exists() and records.read_text()):
        assert first.poll() is None, first.communicate()[1]
        time.sleep(0.01)
    capsys.readouterr()
    assert main(run_args(pair, out, limit=10)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {out} is being written by process {first.pid} on {socket.gethostname()} since "
        f"{err[0].split(' since ')[1].split(';')[0]}; wait for it to end or use another --out"
    ]
    assert first.wait() == 0
    ids = [r["example_id"] for r in RunFolder(out).lines()]
    assert len(ids) == 10 == len(set(ids))
    (session,) = RunFolder(out).manifest()["sessions"]  # the first run's; the second wrote none
    assert session["examples"] == 10
    assert not (out / run_folder.LOCK).exists()


def test_a_run_takes_over_the_lock_a_killed_process_left(pair, tmp_path, capsys):
    out = tmp_path / "run"
    _dead_holder(RunFolder(out))
    dead = RunFolder(out).holder()
    capsys.readouterr()
    assert main(run_args(pair, out, limit=2)) == 0
    assert f"took over the lock left by {dead.text()}, which has ended" in capsys.readouterr().err
    assert len(RunFolder(out).lines()) == 2 and not (out / run_folder.LOCK).exists()


def test_a_full_disk_is_one_line_and_the_run_resumes(pair, tmp_path, capsys, monkeypatch):
    """The third record's write fails with ENOSPC halfway through its line: exit 2 with one
    error line, the two records before it kept, and the same command finishes the run."""
    out = tmp_path / "run"
    real, calls = run_folder._append_line, []

    def full_on_third(f, text):
        calls.append(text)
        if len(calls) == 3:
            f.write(text[: len(text) // 2])
            f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        real(f, text)

    monkeypatch.setattr(run_folder, "_append_line", full_on_third)
    capsys.readouterr()
    assert main(run_args(pair, out, limit=4)) == 2
    err = capsys.readouterr().err
    assert [x for x in err.splitlines() if x.startswith("error")] == [
        f"error: {out}: the disk is full (writing records.jsonl); what was written before is "
        "kept: free some space and run the same command again to resume"
    ]
    assert "Traceback" not in err
    assert len(RunFolder(out).done()) == 2  # the cut third line is dropped
    assert not list(out.glob("*.tmp"))
    monkeypatch.setattr(run_folder, "_append_line", real)
    assert main(run_args(pair, out, limit=4)) == 0
    assert "2 of 4 examples done, 2 to decode" in capsys.readouterr().err
    ids = [x["example_id"] for x in RunFolder(out).lines()]
    assert len(ids) == 4 == len(set(ids))


def test_a_full_disk_when_the_manifest_is_written_keeps_the_old_one(tmp_path, monkeypatch):
    folder = RunFolder(tmp_path)
    folder.write_manifest({"task": "t", "n": 1})
    real = os.replace

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(UserError, match="the disk is full"):
        folder.write_manifest({"task": "t", "n": 2})
    monkeypatch.setattr(os, "replace", real)
    assert folder.manifest() == {"task": "t", "n": 1} and not list(tmp_path.glob("*.tmp"))


def test_report_over_runs_that_scored_nothing_is_one_line(tmp_path, capsys):
    run = RunFolder(tmp_path / "results" / "small__default")
    run.path.mkdir(parents=True)
    manifest = {"task": "gsm8k", "metric": "exact_match", "split": "test", "router": "small"}
    run.write_manifest({**manifest, "router_args": {}})
    run.write_records([{**_rec(0, "boom"), "generation": {}, "completion": "", "seconds": 0.0}])
    assert main(["report", str(run.path.parent)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scored no example yet" in err[0]
    assert not (run.path.parent / "report").exists()


def test_the_summary_line_says_n_a_for_undefined_values(tmp_path):
    from harness.evaluation.spec import Summary

    undefined = {"n": 0, "n_failed": 1, "quality": float("nan"), "tok_per_s": None}
    assert Summary(tmp_path, undefined).line() == "n=0  n_failed=1  quality=n/a  tok_per_s=n/a"
    assert Summary(tmp_path, {"n": 2, "tok_per_s": 3.25}).line() == "n=2  tok_per_s=3.25"


class Tagged(Router):
    """A third party's router whose two settings differ only in characters a folder name loses."""

    name = "tagged"

    def __init__(self, tag: str = "a"):
        self.tag = tag

    def needs(self) -> Needs:
        return Needs()

    @classmethod
    def sweep_settings(cls, targets, fixed):
        return [{"tag": "a/b"}, {"tag": "a-b"}]


def _sweep_plan(tmp_path, routers_: str, jobs: str = "2"):
    import argparse

    from harness.cli import sweep as sweep_command
    from harness.evaluation import sweep

    sub = argparse.ArgumentParser(prog="sweep")
    sweep_command.configure(sub)
    argv = ["--task", "gsm8k", "--routers", routers_, "--targets", "0.2,0.6", "--limit", "2"]
    args = sub.parse_args([*argv, "--jobs", jobs, "--out", str(tmp_path)])
    return sweep.plan_rows(sweep_command.spec_of(args), tmp_path)


def test_a_sweeps_parallel_rows_never_share_a_run_folder(tmp_path):
    jobs = _sweep_plan(tmp_path, "small,large,random,entropy,oracle,speculative")
    outs = [job.argv[job.argv.index("--out") + 1] for job in jobs]
    assert len(outs) == len(set(outs)) == len(jobs) > 5
    with pytest.raises(UserError, match="would share the run folder"):
        _sweep_plan(tmp_path, "tests.test_run_folder:Tagged")


def test_a_second_sweep_into_a_sweeps_folder_is_refused(tmp_path, capsys):
    """A sweep holds its folder (its sweep.json) for its life, as a run holds a run folder."""
    out = tmp_path / "sweep"
    argv = ["sweep", "--task", "gsm8k", "--routers", "small", "--limit", "1", "--out", str(out)]
    with run_folder.folder_lock(out) as me:
        capsys.readouterr()
        assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {out} is being written by {me.text()}; wait for it to end or use another --out"
    )
    assert not (out / "sweep.json").exists()
