"""The real-model chains (scripts/issue13_runs.sh, scripts/issue14_runs.sh) run for many hours
across sessions; a flag renamed in the CLI would stop them at the step that uses it. Here each
script runs with `hybridbench` replaced by a stand-in that only writes down its arguments; each
command line is then parsed here with the real parser (harness.cli.main.build_parser): every one must
parse, and the trained routers' rows appear once their checkpoints exist.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import build_parser
from tests import load_script

ROOT = Path(__file__).resolve().parents[1]

STAND_IN = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["STAND_IN_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def run_chain(script: str, tmp_path: Path, trained: bool, **extra_env: str) -> list[str]:
    """The command lines `script` gives hybridbench, each checked by the real parser, joined."""
    if shutil.which("flock") is None:
        pytest.fail("flock (util-linux) is needed by the chain scripts and was not found")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "hybridbench").write_text(STAND_IN)
    (bin_dir / "hybridbench").chmod(0o755)
    train = tmp_path / "train13"
    if trained:  # stand-ins for issue 13's checkpoints: issue 14 adds their rows when they exist
        for rel in ["reward/reward.pt"] + [
            f"{kind}-{task}/{name}.pt"
            for task in ("gsm8k", "mbpp")
            for kind, name in (("citer-ref", "citer"), ("query", "query"))
        ]:
            (train / rel).parent.mkdir(parents=True, exist_ok=True)
            (train / rel).write_bytes(b"")
        (train / "gsm8k-calib-small").mkdir()  # issue 13's run of small's gsm8k calib answers
        (train / "gsm8k-calib-small" / "summary.json").write_text("{}")
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
        VIRTUAL_ENV=os.environ.get("VIRTUAL_ENV", sys.prefix),
        LOCK=str(tmp_path / "lock"),
        OUT=str(tmp_path / "out"),
        TRAINED=str(train),
        PYTHONPATH=str(ROOT),
        STAND_IN_LOG=str(tmp_path / "argv.jsonl"),
        **extra_env,
    )
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    failed = [line for line in lines if line.startswith("!!")]
    assert not failed, "\n".join(failed) + "\n" + proc.stderr
    steps = [line for line in lines if line.startswith("== ") and not line.endswith(" done")]
    argvs = [json.loads(line) for line in (tmp_path / "argv.jsonl").read_text().splitlines()]
    assert len(argvs) == len(steps) > 0
    for argv in argvs:
        try:
            build_parser(argv).parse_args(argv)
        except SystemExit:
            pytest.fail(f"hybridbench {' '.join(argv)}: does not parse (argparse's message above)")
    return ["hybridbench " + " ".join(argv) for argv in argvs]


def test_issue13_chain_command_lines_parse(tmp_path):
    parsed = run_chain("issue13_runs.sh", tmp_path, trained=False)
    commands = [line.split()[1] for line in parsed]  # "hybridbench <command> ..."
    for command in ("run", "train-query", "train-citer", "reward-data", "train-reward"):
        assert command in commands
    for task in ("gsm8k", "mbpp"):  # label-free CITER reads small's train and calib answers
        (lf,) = [
            line for line in parsed if "--mode label_free" in line and f"--task {task}" in line
        ]
        want = f"{task}-train-small/records.jsonl,{tmp_path}/out/{task}-calib-small/records.jsonl"
        assert want in lf
    assert commands.count("train-reward") == 4  # two depths x two heads


def test_issue11_only_runs_the_tasks_it_names(tmp_path):
    """scripts/heavy_chain.sh runs issue 11's remaining tasks alone (ONLY=...): their small and
    large runs, nothing of the tasks already measured, no reference check."""
    parsed = run_chain("issue11_runs.sh", tmp_path, trained=False, ONLY="commonsense_qa cnn_dm")
    got = [(argv.split("--task ")[1].split()[0], argv.split("--router ")[1].split()[0])
           for argv in parsed]  # fmt: skip
    assert got == [("commonsense_qa", "small"), ("commonsense_qa", "large"),
                   ("cnn_dm", "small"), ("cnn_dm", "large")]  # fmt: skip
    assert all("--split all" in argv for argv in parsed if "cnn_dm" in argv)


def test_keep_results_stages_small_files_and_lists_big_ones(tmp_path):
    """scripts/keep_results.sh: results/ files under the size limit are staged for a commit,
    bigger ones are left out and named."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "keep_results.sh", repo / "scripts")
    run = repo / "results" / "validity" / "csqa-small"
    run.mkdir(parents=True)
    (run / "records.jsonl").write_text('{"id": "1"}\n')
    (run / "labels.safetensors").write_bytes(b"x" * (2 * 1024 * 1024 + 1))
    (run / "records.tmp").write_text("partial")  # ignored: a write under way
    (repo / "results" / ".gitignore").write_text("*.tmp\n")
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    proc = subprocess.run(["bash", "scripts/keep_results.sh"], cwd=repo, env=dict(
        os.environ, MAX_MB="1"), capture_output=True, text=True, check=True)  # fmt: skip
    staged = subprocess.run([*git, "diff", "--cached", "--name-only"], capture_output=True,
                            text=True, check=True).stdout.split()  # fmt: skip
    assert staged == ["results/.gitignore", "results/validity/csqa-small/records.jsonl"]
    assert "results/validity/csqa-small/labels.safetensors (3 MB)" in proc.stdout


@pytest.mark.parametrize("trained", [False, True])
def test_issue14_chain_command_lines_parse(tmp_path, trained):
    parsed = run_chain("issue14_runs.sh", tmp_path, trained=trained)
    sweeps = [line for line in parsed if line.split()[1] == "sweep"]
    assert len(sweeps) == 9  # per task: small and large, the routers, adaptive speculative
    for task in ("gsm8k", "mbpp", "humaneval"):
        first, row = [s for s in sweeps if f"--task {task} " in s and "adaptive" not in s]
        assert "--routers small,large " in first  # decoded here: the rows below reuse them
        assert f"--reuse-answers {tmp_path}/out/{task}/small__default," in row
        routers = row.split("--routers ")[1].split()[0].split(",")
        controls = {"oracle", "speculative", "random", "entropy", "confidence", "random_query"}
        assert controls <= set(routers)
        assert ({"reward", "citer", "query"} <= set(routers)) == trained
    for r in ("reward", "citer"):  # every token router calibrated along small's calib answers
        calibrations = [line for line in parsed if f"calibrate --router {r} " in line]
        assert len(calibrations) == (3 if trained else 0), r
        assert all("--checkpoint " in line for line in calibrations)
    citer_rows = [s for s in sweeps if "citer:path=" in s]
    assert all("citer:calibration=" in s for s in citer_rows) and len(citer_rows) == 3 * trained
    # small's calib answers: issue 13's where it made them, else decoded here
    calib_runs = [line for line in parsed if "--router small --split calib" in line]
    assert len(calib_runs) == (2 if trained else 3)
    gsm8k = [line for line in parsed if line.startswith("hybridbench calibrate --router")
             and "--task gsm8k" in line]  # fmt: skip
    assert gsm8k and all(("train13/gsm8k-calib-small/" in line) == trained for line in gsm8k)


def test_issue14_collects_only_the_editions_own_gpu_rows(tmp_path):
    """--collect copies the GPU replays of this edition's rows into gsm8k's folder (the report's
    GPU section), not the earlier sessions' replays of rows made for the purpose."""
    out = tmp_path / "edition2"
    env = {**os.environ, "OUT": str(out)}
    subprocess.run(["bash", str(ROOT / "scripts" / "issue14_runs.sh"), "--collect"],
                   cwd=ROOT, env=env, check=True, capture_output=True)  # fmt: skip
    copied = sorted(p.name for p in (out / "gsm8k" / "device").iterdir())
    assert copied == ["device-latency-h100-llamacpp-edition2.json"]
    assert len(list((ROOT / "docs" / "data").glob("device-latency-h100*.json"))) > 1


def test_issue14_reruns_rows_its_mbpp_sweep_makes(tmp_path):
    """The rows run again for `hybridbench compare` are folders the mbpp sweeps write."""
    import re

    from harness.evaluation import sweep

    parsed = run_chain("issue14_runs.sh", tmp_path, trained=False)
    names = set()
    for line in parsed:
        argv = line.split()[1:]
        if argv[0] != "sweep" or "mbpp" not in argv:
            continue
        args = build_parser(argv).parse_args(argv)
        chosen = args.routers.split(",")
        fixed = sweep.fixed_router_args(args.router_arg, chosen)
        targets = sweep.parse_targets(args.targets)
        for router in chosen:
            for setting in sweep.router_settings(router, targets, fixed[router]):
                names.add(f"{router}__{sweep.setting_name(setting)}")
    text = (ROOT / "scripts" / "issue14_runs.sh").read_text()
    rows = re.search(r"^rows=(\S+)$", text, re.M).group(1).split(",")
    assert len(rows) >= 3 and set(rows) <= names, set(rows) - names
    assert "speculative__adaptive=true" in names  # its own folder, not speculative__default's


def test_chain_status_reads_runs_training_folders_and_the_reference_check(tmp_path):
    """scripts/chain_status.py: a run's examples done of its target with the hours left at its
    sessions' rate; a training folder's final files and wall hours; reference lines checked."""
    status = load_script("chain_status")

    run = tmp_path / "validity" / "gsm8k-small"
    run.mkdir(parents=True)
    manifest = {"task": "gsm8k", "task_args": {}, "split": "test", "split_seed": 0, "limit": 10,
                "sessions": [{"examples": 2, "wall_s": 360.0}, {"batch": 16}]}  # fmt: skip
    (run / "manifest.json").write_text(json.dumps(manifest))
    recs = [{"example_id": f"gsm8k/test/{i}", "error": ""} for i in range(4)]
    recs.append({"example_id": "gsm8k/test/9", "error": "boom"})  # failed: not done
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    train = tmp_path / "train13" / "citer-lf-gsm8k"
    train.mkdir(parents=True)
    (train / "citer.pt").write_bytes(b"")
    (train / "cost.jsonl").write_text(
        json.dumps({"wall_s": 5400}) + "\n" + json.dumps({"wall_s": 1800}) + "\n"
    )
    ref = tmp_path / "reference"
    ref.mkdir()
    (ref / "gsm8k-small.jsonl").write_text("{}\n{}\n{}\n")
    cal = tmp_path / "edition2" / "calibration" / "gsm8k"  # calibrate's files, one per router
    cal.mkdir(parents=True)
    (cal / "entropy.json").write_text("{}")
    (cal / "cost.jsonl").write_text(json.dumps({"wall_s": 360}) + "\n")
    out = []
    for root in ("validity", "train13", "reference", "edition2"):
        out += status.lines(tmp_path / root)
    # 6 to go at 2 examples per 360 s = 20 examples/h
    assert out[0] == f"{run}: done 4/10, 6 to go, ~0.3 h at 20 examples/h"
    assert out[1] == f"{train}: citer.pt; 2.00 h so far"
    assert out[2] == f"{ref / 'gsm8k-small.jsonl'}: 3 examples checked"
    assert out[3] == f"{cal}: entropy.json; 0.10 h so far"
    assert status.lines(tmp_path / "edition3") == [f"{tmp_path / 'edition3'}: not started"]
    manifest["limit"] = 1000  # all of the split: gsm8k's test split holds 678
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert status.run_status(run).startswith("done 4/678, 674 to go")


def test_publish_edition_copies_runs_compressed_and_the_report_regenerates(tmp_path, capsys):
    """scripts/publish_edition.py: run folders with their records gzip-compressed (same bytes
    every time), the device rows, the router files the runs name; the published folder's report
    is the one the sweep's own folder gives."""
    from reports import write_report
    from reports.demo import write_demo_results

    publish = load_script("publish_edition")

    src = tmp_path / "edition" / "demo"
    write_demo_results(src, n_examples=6)
    ckpt = tmp_path / "reward.pt"
    ckpt.write_bytes(b"weights")
    manifest = json.loads((src / "reward_threshold1" / "manifest.json").read_text())
    manifest["router_args"]["checkpoint"] = str(ckpt)
    (src / "reward_threshold1" / "manifest.json").write_text(json.dumps(manifest))
    # citer's and query's arguments name their checkpoint file (path) and, from their
    # calibration file, the sha256 prefix of that checkpoint (checkpoint): a file and a hash
    other = src / "reward_threshold2" / "manifest.json"
    manifest = json.loads(other.read_text())
    manifest["router_args"] |= {"path": str(ckpt), "checkpoint": "f35f1ce099e7756e"}
    other.write_text(json.dumps(manifest))
    (src / "device").mkdir()
    shutil.copy(ROOT / "docs" / "data" / "device-latency-h100.json", src / "device")
    shutil.copytree(src / "large", src / "anchors" / "machine1")  # a speed anchor goes along
    dest = tmp_path / "published"
    assert publish.main([str(src.parent), str(dest), "--tasks", "demo"]) == 0
    assert not list((dest / "demo").rglob("records.jsonl"))
    gz = sorted((dest / "demo").rglob("records.jsonl.gz"))
    assert len(gz) == 10 and (dest / "demo" / "device" / "device-latency-h100.json").is_file()
    assert (dest / "demo" / "anchors" / "machine1" / "records.jsonl.gz") in gz
    first = [p.read_bytes() for p in gz]
    assert publish.main([str(src.parent), str(dest), "--tasks", "demo"]) == 0
    assert [p.read_bytes() for p in gz] == first  # no timestamp in the gzip header
    assert "not found" not in capsys.readouterr().err  # the hash is not taken for a file
    listing = json.loads((dest / "routers" / "files.json").read_text())
    ((name, entry),) = listing.items()
    assert entry["used_as"] == str(ckpt) and (dest / "routers" / name).read_bytes() == b"weights"
    want = write_report(src, tmp_path / "from-src").parent
    got = dest / "demo" / "report"
    for f in sorted(p.name for p in want.iterdir()):
        assert (got / f).read_bytes() == (want / f).read_bytes(), f


def test_calibration_loops_splits_the_pool_by_answers_cut_at_the_budget(tmp_path, capsys):
    """scripts/calibration_loops.py: a loop's many low scores make most of a reward calibration's
    low tail; the threshold from answers that ended by themselves defers the target share of
    those answers' tokens."""
    from scripts import calibration_loops as cl

    ended = [float(i) for i in range(10)]  # 0..9
    loop = [float(-i) for i in range(1, 11)]  # a budget-cut answer, every token scored low
    (tmp_path / "cal.json").write_text(json.dumps(
        {"router": "reward", "example_ids": ["a", "b"], "scores": ended + loop}))  # fmt: skip
    with open(tmp_path / "rec.jsonl", "w") as f:
        for eid, n, stop in (("a", 10, "eos"), ("b", 10, "max_tokens")):
            f.write(json.dumps({"example_id": eid, "generation": {
                "token_ids": [0] * n, "stop_reason": stop}}) + "\n")  # fmt: skip
    answers = cl.per_answer(tmp_path / "cal.json", tmp_path / "rec.jsonl")
    assert [(e, cut, len(xs)) for e, cut, xs in answers] == [("a", False, 10), ("b", True, 10)]
    assert cl.share("reward", ended, 2.0) == 0.2 and cl.share("entropy", ended, 7.0) == 0.2
    sys.argv = ["calibration_loops.py", str(tmp_path / "cal.json"), str(tmp_path / "rec.jsonl"),
                "--targets", "0.2"]  # fmt: skip
    cl.main()
    out = capsys.readouterr().out
    assert "2 answers, 1 cut at the budget holding 10 of 20 scored tokens" in out
    rows = [r for r in out.splitlines() if r.startswith("| 0.2 |")]
    # all answers: 20% of the pool is 4 tokens, all from the loop: none of the ended answer's
    assert rows[0].split("|")[4].strip() == "0.000 / 0.400"
    assert rows[1].split("|")[4].strip().startswith("0.200 / ")  # ended answers: 2 of their 10


def test_matched_controls_aims_each_control_at_an_unmatched_share():
    """Routers with no control run within 2 points of their share get one, aimed at the middle
    of each group of such shares spanning at most 1.5 points, p interpolated between the control
    runs bracketing that share (else the nearest run's asked / realized ratio)."""
    import pandas as pd

    rows = [("small", 0.0, None), ("large", 1.0, None), ("random", 0.102, 0.1),
            ("random", 0.21, 0.2), ("entropy", 0.097, 0.1), ("citer", 0.045, 0.1),
            ("reward", 0.05, 0.1), ("reward", 0.294, 0.35), ("query", 0.01, 0.1),
            ("random_query", 0.30, 0.35), ("query", 0.335, 0.35)]  # fmt: skip
    df = pd.DataFrame(rows, columns=["router", "large_token_share", "setting_value"])
    got = load_script("matched_controls").needed(df)
    # entropy is matched (0.102); citer 0.045 and reward 0.05 share one control aimed at 0.0475,
    # below every random run: p = 0.0475 x 0.1 / 0.102; query 0.01 is matched by small-only (p = 0)
    assert got == [("random", 0.047), ("random", 0.28), ("random_query", 0.391)]
    # bracketed: interpolated (mbpp's query 0.35 at 0.461, random_query runs at 0.338 and 0.491)
    rq = pd.DataFrame([("random_query", 0.338, 0.455), ("random_query", 0.491, 0.611),
                       ("query", 0.461, 0.35)], columns=df.columns)  # fmt: skip
    assert load_script("matched_controls").needed(rq) == [("random_query", 0.58)]
    # no control run of that kind yet: p = the share (entropy now unmatched, 4.7 points from
    # citer: a group of its own)
    assert load_script("matched_controls").needed(df[df.router != "random"])[:3] == [
        ("random", 0.048), ("random", 0.097), ("random", 0.294)]  # fmt: skip
    # a group spans at most 1.5 points: 0.20, 0.21, 0.215 share one control; 0.225 starts the next
    wide = pd.DataFrame([("entropy", s, 0.2) for s in (0.20, 0.21, 0.215, 0.225)],
                        columns=["router", "large_token_share", "setting_value"])  # fmt: skip
    assert load_script("matched_controls").needed(wide) == [("random", 0.208), ("random", 0.225)]


def test_matched_controls_resumes_a_control_the_chain_stopped_in():
    """A control run stopped part way (29 of 200 examples) is printed first, to be resumed, not
    taken as done (it once left random p=0.148 at 29/200: its partial share matched the router
    it was aimed at); one started with nothing decoded (no share yet) blocks no other router."""
    import math

    import pandas as pd

    rows = [("small", 0.0, None, 200), ("large", 1.0, None, 200), ("random", 0.102, 0.1, 200),
            ("random", 0.156, 0.148, 29), ("reward", 0.150, -1.2, 200),
            ("reward", 0.294, -0.7, 200), ("random", math.nan, 0.5, 0)]  # fmt: skip
    df = pd.DataFrame(rows, columns=["router", "large_token_share", "setting_value", "n"])
    df["n_failed"] = 0
    got = load_script("matched_controls").needed(df)
    assert got[:2] == [("random", 0.148), ("random", 0.5)]  # unfinished first, to resume
    assert got[2:] == [("random", round(0.294 * 0.148 / 0.156, 3))]  # reward 0.294's control
    df.loc[df.setting_value == 0.148, "n"] = 200  # finished: nothing to resume, still matches
    assert load_script("matched_controls").needed(df[df.n > 0]) == got[2:]


def test_issue14_runs_the_controls_matched_controls_asks_for(tmp_path):
    """The chain runs each control `scripts/matched_controls.py` prints, for a few rounds (the
    stand-in decodes nothing, so the same ones each round)."""
    from reports import load_runs
    from reports.demo import write_demo_results

    write_demo_results(tmp_path / "out" / "gsm8k", n_examples=12)
    want = load_script("matched_controls").needed(load_runs(tmp_path / "out" / "gsm8k"))
    assert want  # the demo's reward runs are not all matched by its random ones
    parsed = run_chain("issue14_runs.sh", tmp_path, trained=False)
    got = [line for line in parsed if "--task gsm8k " in line and "--routers random " in line]
    assert got == [line for _ in range(3) for line in got[: len(want)]]
    assert [line.split("random:p=")[1].split()[0] for line in got[: len(want)]] == [
        str(p) for _, p in want]  # fmt: skip
