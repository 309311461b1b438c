"""The command line end to end on tiny models saved to disk: generate, run, resume, user errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli.main import main
from tests.tiny import save_tiny_pair, tiny_gguf_pair, tiny_tokenizer

ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "PYTHONPATH": str(Path(__file__).parents[1]),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_tiny_pair(tmp_path_factory.mktemp("tiny"))


def models(pair):
    return ["--small", pair[0], "--large", pair[1], "--dtype", "float32", "--threads", "1"]


def cli(*argv, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *argv],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=timeout,
    )


def test_generate_marks_large_tokens_and_prints_ratios(pair, capsys):
    rc = main(
        [
            "generate",
            "--router",
            "oracle",
            "--prompt",
            "hi",
            "--max-new-tokens",
            "12",
            *models(pair),
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0
    assert "[[" in out  # large's tokens are marked when stdout is not a terminal
    assert "large_token_share=" in err and "large_call_share=1.000" in err and "tok/s" in err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--router", "nope"], "unknown router 'nope'; valid routers:"),
        (["--router", "random", "--router-arg", "q=1"], "router 'random' has no argument q"),
        (["--router", "random", "--router-arg", "p=2"], "p must be in [0, 1]"),
        (["--router", "small", "--max-new-tokens", "-1"], "--max-new-tokens must be >= 0"),
        (["--router", "small", "--small", "/no/such/model"], "model path not found"),
    ],
)
def test_user_errors_are_one_line(pair, argv, message):
    r = cli("generate", "--prompt", "hi", *models(pair), *argv)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr


def test_tokenizer_mismatch_is_refused(pair, tmp_path):
    other = tmp_path / "other"
    tok = tiny_tokenizer()
    tok.add_tokens(["<extra>"])
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(pair[1]).save_pretrained(other)
    tok.save_pretrained(other)
    r = cli(
        "generate",
        "--prompt",
        "hi",
        "--router",
        "large",
        *models(pair)[:2],
        "--large",
        str(other),
        "--dtype",
        "float32",
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "tokenizers differ" in r.stderr


def test_unknown_task_is_one_line(pair, tmp_path):
    r = cli(
        "run", "--task", "nope", "--router", "small", "--out", str(tmp_path / "r"), *models(pair)
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and "unknown task" in r.stderr


def run_args(pair, out, limit=6):
    return [
        "run",
        "--task",
        "gsm8k",
        "--router",
        "random",
        "--router-arg",
        "p=0.5",
        "--split",
        "test",
        "--limit",
        str(limit),
        "--max-new-tokens",
        "48",
        "--out",
        str(out),
        *models(pair),
    ]


DETERMINISTIC = (
    "n",
    "n_failed",
    "quality",
    "quality_ci_low",
    "quality_ci_high",
    "large_token_share",
    "large_call_share",
    "tokens_per_example",
    "steps_per_example",
    "bytes_total",
)


def test_run_writes_records_manifest_summary_and_resumes(pair, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(run_args(pair, out, limit=3)) == 0
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 3
    rec = json.loads(lines[0])
    assert set(rec) >= {"example_id", "completion", "scores", "generation", "seconds", "error"}
    assert len(rec["generation"]["provenance"]) == len(rec["generation"]["token_ids"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["models"]["large"]["kv_bytes_per_token"] > 0 and manifest["router_args"] == {
        "p": 0.5
    }
    assert main(run_args(pair, out, limit=5)) == 0  # resume: only 2 new examples decoded
    assert f"{out}: 3 of 5 examples done, 2 to decode" in capsys.readouterr().err
    assert json.loads((out / "manifest.json").read_text())["limit"] == 5  # the latest asked
    assert main(run_args(pair, out, limit=4)) == 0  # nothing to decode: the summary covers 4
    assert json.loads((out / "manifest.json").read_text())["limit"] == 4
    assert json.loads((out / "summary.json").read_text())["n"] == 4
    ids = [json.loads(x)["example_id"] for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(ids) == 5 == len(set(ids)) and ids[:3] == [
        json.loads(x)["example_id"] for x in lines
    ]


def test_resume_refuses_a_different_run(pair, tmp_path):
    out = tmp_path / "run"
    assert main(run_args(pair, out, limit=1)) == 0
    args = run_args(pair, out, limit=1)
    args[args.index("p=0.5")] = "p=0.2"
    r = cli(*args)
    assert r.returncode == 2 and "holds a different run (router_args differ)" in r.stderr


def start_and_signal(pair, out: Path, sig: int, after: int = 2) -> tuple[int, str]:
    """A `run` of 8 examples in a subprocess, sent `sig` once `after` records are written: its
    exit status and standard error."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli.main", *run_args(pair, out, limit=8)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    records = out / "records.jsonl"
    deadline = time.time() + 600  # generous: a loaded machine starts the subprocess slowly
    while time.time() < deadline and proc.poll() is None:
        if records.exists() and len(records.read_text().splitlines()) >= after:
            break
        time.sleep(0.01)
    proc.send_signal(sig)
    return proc.wait(), proc.communicate()[1]


def test_sigkill_mid_run_then_resume_equals_uninterrupted(pair, tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    assert main(run_args(pair, full, limit=8)) == 0
    start_and_signal(pair, killed, signal.SIGKILL)
    records = killed / "records.jsonl"
    n_before = len(records.read_text().splitlines())
    assert 2 <= n_before < 8, "the kill should land mid-run"
    # the killed session's examples and wall time were saved with every example (the kill may
    # land between a record and the manifest written after it)
    (session,) = json.loads((killed / "manifest.json").read_text())["sessions"]
    assert session["examples"] in (n_before - 1, n_before) and session["wall_s"] > 0
    assert cli(*run_args(pair, killed, limit=8)).returncode == 0
    ids = [json.loads(x)["example_id"] for x in records.read_text().splitlines()]
    full_ids = [
        json.loads(x)["example_id"] for x in (full / "records.jsonl").read_text().splitlines()
    ]
    assert sorted(ids) == sorted(full_ids) and len(ids) == len(set(ids))
    a = json.loads((full / "summary.json").read_text())
    b = json.loads((killed / "summary.json").read_text())
    assert {k: a[k] for k in DETERMINISTIC} == {k: b[k] for k in DETERMINISTIC}


def test_sigterm_closes_the_session_as_ctrl_c_does(pair, tmp_path):
    out = tmp_path / "run"
    returncode, stderr = start_and_signal(pair, out, signal.SIGTERM)
    n_before = len((out / "records.jsonl").read_text().splitlines())
    assert 2 <= n_before < 8, "the signal should land mid-run"
    assert returncode == 130 and "interrupted" in stderr
    assert f"stopped, {n_before} of 8 examples done, {8 - n_before} to decode" in stderr
    (session,) = json.loads((out / "manifest.json").read_text())["sessions"]
    # the signal may fall between a record and the count after it
    assert session["examples"] in (n_before - 1, n_before) and session["wall_s"] > 0


def test_sigterm_inside_a_c_callback_still_stops_the_command():
    """A SIGTERM that lands while C code calls back into Python (llama.cpp logs through a ctypes
    callback while a model loads) raises inside the callback, where ctypes reports and ignores
    it; the command still stops, at the next Python code outside the callback."""
    import ctypes
    import ctypes.util

    from harness.cli.main import Terminated, terminable

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    compare = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    landed = []

    @compare
    def callback(a, b):  # stands for llama.cpp's log callback
        if not landed:
            landed.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))  # the handler runs here, inside the callback
        return 0

    values = (ctypes.c_int * 8)(*range(8))
    after, handler, hook = [], signal.getsignal(signal.SIGTERM), sys.unraisablehook
    with pytest.raises(Terminated), terminable():
        libc.qsort(values, 8, ctypes.sizeof(ctypes.c_int), callback)
        time.sleep(5)  # the command's next work: the signal stops it
        after.append("went on")
    assert landed and after == []  # stopped, not carried on
    assert signal.getsignal(signal.SIGTERM) is handler and sys.unraisablehook is hook  # restored


def test_demo_prints_one_row_per_router(pair, tmp_path, capsys, monkeypatch):
    """The demo runs small, large and routers at a matched share on one loaded pair, and prints
    one table: each router's quality, share and the gap it recovered, no placeholder."""
    from harness.backends import engine as engines

    loads = []
    real = engines.engine_from_args
    monkeypatch.setattr(engines, "engine_from_args", lambda *a: loads.append(a) or real(*a))
    argv = [
        "demo",
        "--routers",
        "small,large,random,entropy",
        "--limit",
        "2",
        "--max-new-tokens",
        "16",
        "--out",
        str(tmp_path / "demo"),
        "--large-device",
        "cpu",
        *models(pair),
    ]
    assert main(argv) == 0
    assert loads[0][0].large_device == "cpu"  # the model options reach the runs
    out = capsys.readouterr().out
    table = out.split("| router |")[-1]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows] == ["small", "large", "random", "entropy"]
    cells = {r.split("|")[1].strip(): [c.strip() for c in r.strip("|").split("|")] for r in rows}
    assert cells["small"][4] == "0.000" and cells["large"][4] == "1.000"  # large-token share
    assert cells["random"][1] == "p = 0.2" and cells["entropy"][1].startswith("target 20% (")
    assert "nan" not in out.lower()  # no tok_per_s=nan or similar placeholder
    assert "routers x 2 mbpp test examples in" in out
    summary = (tmp_path / "demo" / "mbpp" / "small" / "summary.json").read_text()
    assert "NaN" not in summary  # strict JSON: undefined values are null
    entropy = json.loads((tmp_path / "demo" / "mbpp" / "entropy" / "manifest.json").read_text())
    assert entropy["router_args"]["calibration"].endswith("routers/data/mbpp-entropy.json")
    from harness.backends.machine import machine_id

    ids = {json.loads((tmp_path / "demo" / "mbpp" / r / "manifest.json").read_text())
           ["sessions"][0]["machine"]["id"] for r in ("small", "large", "entropy")}  # fmt: skip
    assert ids == {machine_id()} and len(machine_id()) == 12  # one machine, one id
    assert len(loads) == 1  # one pair loaded for the demo's four runs


def test_demo_says_why_a_router_cannot_run():
    """A router the demo has no file for is named with the reason, not run."""
    from harness.cli.demo import router_args

    assert router_args("citer", "arc", 0.2) == "no published CITER router for arc"
    assert "no shipped entropy calibration" in router_args("entropy", "gsm8k", 0.2)
    assert router_args("random", "mbpp", 0.2) == ["p=0.2"]


def test_demo_runs_the_citer_files_the_published_edition_ran():
    """The demo's CITER row takes its checkpoint and calibration from the published runs'
    router arguments, as stored under reports/published/routers/ (same bytes as the runs used)."""
    from harness.cli.demo import PUBLISHED, published_runs, router_args
    from harness.files import file_sha256

    args = dict(a.split("=", 1) for a in router_args("citer", "mbpp", 0.2))
    runs = published_runs("mbpp")
    used = json.loads(runs.loc[runs["router"] == "citer", "router_args"].iloc[0])
    listed = json.loads((PUBLISHED / "routers" / "files.json").read_text())
    for key in ("path", "calibration"):
        entry = listed[Path(args[key]).name]
        assert entry["used_as"] == used[key] and file_sha256(args[key]) == entry["sha256"]
    assert args["target_share"] == "0.2"


def test_bench_decode_prints_measured_and_predicted(pair, tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = [
        "bench-decode",
        "--prompts",
        "1",
        "--tokens",
        "8",
        "--rates",
        "0.5",
        "--out",
        str(out),
        *models(pair),
    ]
    assert main(argv) == 0
    rows = json.loads(out.read_text())["hf"]["rows"]
    assert [r["config"] for r in rows] == [
        "small-only",
        "large-only",
        "random p=0.5",
        "speculative k=4",
        "speculative adaptive",
    ]
    assert rows[0]["large_token_share"] == 0 and rows[1]["large_token_share"] == 1
    assert all(r["tok_s"] > 0 and 0 <= r["loop_overhead"] < 1 for r in rows)
    assert "| random p=0.5 |" in capsys.readouterr().out


def test_bench_decode_both_backends_in_one_process(tmp_path, capsys):
    """--backends hf,llama.cpp: one table per backend on the same GGUF pair, llama-cpp-python's
    own greedy loop as the reference rows, and the speed ratios."""
    small, large = tiny_gguf_pair()
    out = tmp_path / "bench.json"
    argv = ["bench-decode", "--prompts", "1", "--tokens", "8", "--rates", "0.5"]
    argv += ["--small", str(small), "--large", str(large), "--dtype", "float32"]
    argv += ["--backends", "hf,llama.cpp", "--threads", "1", "--n-ctx", "512", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert set(result) == {"hf", "llama.cpp"}
    own = [r for r in result["llama.cpp"]["rows"] if r["config"].startswith("llama-cpp-python")]
    assert len(own) == 2 and all(r["tok_s"] > 0 for r in own)
    printed = capsys.readouterr().out
    assert "small-only: llama.cpp / hf = " in printed and "backend llama.cpp:" in printed


def test_run_on_llamacpp_records_the_backend(tmp_path):
    small, large = tiny_gguf_pair()
    out = tmp_path / "run"
    argv = ["run", "--task", "cnn_dm", "--router", "oracle", "--limit", "2", "--out", str(out)]
    argv += ["--small", str(small), "--large", str(large), "--max-new-tokens", "6"]
    argv += ["--backend", "llama.cpp", "--threads", "1", "--n-ctx", "1024"]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model_sources"]["backends"] == {"small": "llama.cpp", "large": "llama.cpp"}
    assert manifest["models"]["large"]["backend"].startswith("llama.cpp ")
    assert manifest["models"]["small"]["dtype"] == "gguf:F32 x39"
    # the same folder with another backend is another run: refused, not mixed
    hf = argv[: argv.index("--backend")] + ["--backend", "hf", "--dtype", "float32"]
    assert main(hf) == 2


def test_help_lists_every_command_and_where_to_start(capsys):
    from harness.cli.main import COMMANDS

    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: hybridbench [-h] COMMAND ...")
    listed = {
        line.split()[0] for line in out.splitlines() if line.startswith("    ") and line.split()
    }
    assert set(COMMANDS) <= listed
    assert "hybridbench demo" in out and "docs/routers.md" in out


@pytest.mark.parametrize("argv", [["experiment", "--help"], ["compare", "--help"]])
def test_a_command_that_decodes_nothing_starts_without_torch(argv):
    """Parsing `experiment` (status, plan, verdicts) or `compare` imports no torch (seconds)."""
    code = (
        "import sys\nfrom harness.cli.main import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\nprint('torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], env=ENV, capture_output=True, text=True
    )
    assert out.stdout.strip().endswith("False"), out.stderr


@pytest.fixture
def drained():
    """`harness.evaluation.drain`, cleared before and after the test (a drain is per process)."""
    from harness.evaluation import drain

    drain.clear()
    yield drain
    drain.clear()


def test_a_drained_run_records_the_examples_in_flight_then_stops(
    pair, tmp_path, monkeypatch, drained, capsys
):
    """A drain asked when the first example is recorded (3 decoding together) takes no new
    example, records the 2 still in flight and stops as an interrupt does: no summary, and the
    same command decodes the other 5."""
    from harness.evaluation import runner

    progress = runner._progress  # called as each example is recorded
    monkeypatch.setattr(runner, "_progress", lambda *a: drained.ask() or progress(*a))
    out = tmp_path / "run"
    argv = [*run_args(pair, out, limit=8), "--batch", "3"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "drained" in err and "stopped, 3 of 8 examples done, 5 to decode" in err
    assert len((out / "records.jsonl").read_text().splitlines()) == 3
    assert not (out / "summary.json").exists()
    monkeypatch.setattr(runner, "_progress", progress)
    drained.clear()
    assert main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["n"] == 8


def test_sigusr1_asks_a_drain(drained):
    from harness.cli.main import terminable

    with terminable():
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.1)  # the handler runs at the next Python instruction
        assert drained.asked()


def test_drain_after_drains_an_experiment_once_its_time_is_up(
    tmp_path, drained, monkeypatch, capsys
):
    """`experiment run --drain-after HOURS`: when the time is up a drain is asked, the step under
    way finishes and the next does not begin; 0 hours is refused."""
    from harness.cli import experiment as experiment_command

    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[experiment]\nout = "{tmp_path / "out"}"\n[tasks]\ngsm8k = {{ n = 2 }}\n'
        '[[steps]]\nname = "first"\ncommand = "routers"\n'
        '[[steps]]\nname = "second"\ncommand = "tasks"\n'
    )
    ran = []

    def slow(argv):  # a step that outlasts the time given
        ran.append(argv[0])
        time.sleep(1.5)
        return 0

    monkeypatch.setattr(experiment_command, "execute", slow)
    assert main(["experiment", "run", str(spec), "--drain-after", str(0.2 / 3600)]) == 130
    assert ran == ["routers"]
    out, err = capsys.readouterr()
    assert "the time given (--drain-after) is up: draining" in err and "drained" in err
    assert "stopped before [2/2] second (drained)" in out
    drained.clear()
    assert main(["experiment", "run", str(spec), "--drain-after", "0"]) == 2
    assert "--drain-after must be > 0" in capsys.readouterr().err


def test_a_drained_experiment_begins_no_step(tmp_path, drained):
    """A drain asked while an experiment's step ran outside a run: the next step does not begin."""
    from harness.evaluation import experiment, experiment_run

    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[experiment]\nout = "{tmp_path / "out"}"\n[tasks]\ngsm8k = {{ n = 2 }}\n'
        '[[steps]]\nname = "first"\ncommand = "routers"\n'
        '[[steps]]\nname = "second"\ncommand = "tasks"\n'
    )
    ran, said = [], []
    execute = lambda argv: ran.append(argv[0]) or drained.ask() or 0  # noqa: E731
    with pytest.raises(drained.Drained):
        experiment_run.run(experiment.load(spec), execute, None, said.append)
    assert ran == ["routers"]
    assert any("stopped before [2/2] second (drained)" in line for line in said)
