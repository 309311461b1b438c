"""Experiment specs (experiments/*.toml) and the commands that run them: `hybridbench experiment
run|status|plan`, `hybridbench controls`, `hybridbench publish`.

The specs run for days on the real pair, across sessions; a flag renamed in the CLI would stop
them at the step that uses it, so every command line each spec gives is parsed here by the real
parser. The rehearsals run edition2.toml end to end on the tiny GGUF pair (small n, the pair
overridden): calibrations, rows, speed anchor, matched controls, publishing, and a second run
that finds everything done.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import signal
from pathlib import Path

import pandas as pd
import pytest

from harness.cli import experiment as experiment_command
from harness.cli.main import build_parser, main
from harness.core.run_folder import RunFolder
from harness.errors import UserError
from harness.evaluation import controls, experiment, experiment_run, progress, verdict_table
from harness.evaluation.experiment import (
    Anchor,
    Command,
    Controls,
    Copy,
    Publish,
    Runs,
    Select,
    Verdicts,
)
from harness.metrics.quality import large_token_share
from tests.tiny import tiny_gguf_pair

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "experiments").glob("*.toml"))
EDITION2 = ROOT / "experiments" / "edition2.toml"


def commands(spec) -> list[tuple[str, ...]]:
    return [s.argv for s in experiment.steps(spec) if isinstance(s, Command | Publish)]


def parses(argv) -> None:
    try:
        build_parser(list(argv)).parse_args(list(argv))
    except SystemExit:
        pytest.fail(f"hybridbench {' '.join(argv)}: does not parse (argparse's message above)")


def trained_stand_ins(train: Path) -> None:
    """Empty files where the trained-routers experiment leaves its checkpoints, and its run of
    small's gsm8k calib answers: edition2 adds the trained routers' rows when they exist."""
    for rel in ["reward/reward.pt"] + [f"{kind}-{task}/{name}.pt" for task in ("gsm8k", "mbpp")
                                       for kind, name in (("citer-ref", "citer"), ("query", "query"))]:  # fmt: skip
        (train / rel).parent.mkdir(parents=True, exist_ok=True)
        (train / rel).write_bytes(b"")
    (train / "gsm8k-calib-small").mkdir()
    (train / "gsm8k-calib-small" / "summary.json").write_text("{}")


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_spec_gives_command_lines_that_parse(path, tmp_path):
    spec = experiment.load(path, out=str(tmp_path / "out"))
    argvs = commands(spec)
    assert argvs
    for argv in argvs:
        parses(argv)


@pytest.mark.parametrize("trained", [False, True])
def test_edition2_rows_calibrations_and_trained_routers(tmp_path, trained):
    train = tmp_path / "train"
    if trained:
        trained_stand_ins(train)
    out = tmp_path / "out"
    spec = experiment.load(EDITION2, out=str(out), sets=[f"vars.trained={train}"])
    lines = [" ".join(a) for a in commands(spec)]
    sweeps = [line for line in lines if line.startswith("sweep ")]
    assert len(sweeps) == 15  # per task: the ends, the bounds, token, query, adaptive speculative
    for task in ("gsm8k", "mbpp", "humaneval"):
        rows = [s for s in sweeps if f"--task {task} " in s]
        assert "--routers small,large " in rows[0]  # decoded first: the rows below reuse them
        query = [s for s in rows if "--routers random_query" in s]
        assert len(query) == 1 and f"--reuse-answers {out}/{task}/small__default," in query[0]
        routers = {r for s in rows for r in s.split("--routers ")[1].split()[0].split(",")}
        assert {
            "oracle",
            "speculative",
            "random",
            "entropy",
            "confidence",
            "random_query",
        } <= routers
        assert ({"reward", "citer", "query"} <= routers) == trained
    for r in ("reward", "citer"):  # every token router calibrated along small's calib answers
        calibrations = [line for line in lines if line.startswith(f"calibrate --router {r} ")]
        assert len(calibrations) == (3 if trained else 0), r
        assert all("--checkpoint " in line for line in calibrations)
    citer_rows = [s for s in sweeps if "citer:path=" in s]
    assert all("citer:calibration=" in s for s in citer_rows) and len(citer_rows) == 3 * trained
    humaneval = [s for s in citer_rows if "--task humaneval" in s]  # a transfer: mbpp's router
    assert all("citer-ref-mbpp/citer.pt" in s for s in humaneval)
    # small's calib answers: trained-routers' where it made them, else decoded here
    assert len([x for x in lines if "--router small --task" in x and "--split calib" in x]) == (
        2 if trained else 3
    )
    gsm8k = [x for x in lines if x.startswith("calibrate --router") and "--task gsm8k" in x]
    assert gsm8k and all(("train/gsm8k-calib-small/" in x) == trained for x in gsm8k)
    notes = [s.label for s in experiment.steps(spec) if isinstance(s, experiment.Note)]
    assert len(notes) == (0 if trained else 9)  # three trained routers left out, per task


def test_edition2_resumes_the_folders_its_published_edition_holds():
    """The spec's own folders: every row, calibration and control of the real edition is done
    (the rows from their published copies where the working copies left the tree, or hold
    only rows a later experiment added beside them). Its publish step is not asked: a later
    experiment's rows in the working copy wait for that experiment's own publish step."""
    spec = experiment.load(EDITION2)
    for step in experiment.steps(spec):
        if isinstance(step, Command) and step.runs is not None:
            assert progress.is_done(step), step.label
        if isinstance(step, Controls) or (isinstance(step, Command) and step.argv[0]
                                          == "calibrate"):  # fmt: skip
            assert progress.is_done(step), step.label


def test_trained_routers_steps(tmp_path):
    spec = experiment.load(ROOT / "experiments" / "trained-routers.toml", out=str(tmp_path))
    lines = [" ".join(a) for a in commands(spec)]
    names = [line.split()[0] for line in lines]
    for command in ("run", "train-query", "train-citer", "reward-data", "train-reward"):
        assert command in names
    for task in ("gsm8k", "mbpp"):  # label-free CITER reads small's train and calib answers
        (lf,) = [x for x in lines if "--mode label_free" in x and f"--task {task}" in x]
        assert f"{task}-train-small/records.jsonl,{tmp_path}/{task}-calib-small/records.jsonl" in lf
    (ref,) = [x for x in lines if "--mode reference" in x and "--task gsm8k" in x]
    assert "--rollout-tokens 768" in ref
    assert names.count("train-reward") == 4  # two depths x two heads
    assert all("--backend" not in x for x in lines if x.startswith("train-reward"))
    (select,) = [s for s in experiment.steps(spec) if isinstance(s, Select)]
    assert select.files == ("reward.pt", "metrics.json") and select.to == tmp_path / "reward"


def test_learned_router_steps(tmp_path):
    """The learned router's plan: its trainings on gsm8k and mbpp, calibrations one sequence at a
    time, rows at three shares (humaneval runs mbpp's router), random controls, entropy and
    confidence aimed at its shares, paired verdicts; gsm8k's rows wait for its checkpoint."""
    learned = tmp_path / "learned"
    (learned / "mbpp").mkdir(parents=True)
    (learned / "mbpp" / "learned.pt").write_bytes(b"")
    spec = experiment.load(ROOT / "experiments" / "learned-router.toml", out=str(tmp_path / "ed"),
                           sets=[f"vars.learned={learned}"])  # fmt: skip
    steps = experiment.steps(spec)
    lines = [" ".join(a) for a in commands(spec)]
    trainings = [x for x in lines if x.startswith("train-learned ")]
    assert len(trainings) == 8 and all("--batch 1 " in x for x in trainings)
    assert sum("--overhead 4" in x for x in trainings) == 2
    assert sum(f"--features {learned}/mbpp/features" in x for x in trainings) == 2
    calibrations = [x for x in lines if x.startswith("calibrate --router learned ")]
    assert [x.split("--task ")[1].split()[0] for x in calibrations] == ["mbpp", "humaneval"]
    assert all(f"--checkpoint {learned}/mbpp/learned.pt" in x and "--batch 1 " in x
               for x in calibrations)  # fmt: skip
    sweeps = [x for x in lines if x.startswith("sweep ")]
    assert len(sweeps) == 2 and all("--targets 0.1,0.2,0.35" in x and "--batch auto" in x and
                                    "learned:calibration=" in x for x in sweeps)  # fmt: skip
    notes = [s.label for s in steps if isinstance(s, experiment.Note)]
    waits = f"waits for {learned}/gsm8k/learned.pt"
    assert notes == [
        f"gsm8k: learned left out of its rows ({learned}/gsm8k/learned.pt not found)",
        f"gsm8k: entropy and confidence at the learned rows' shares: {waits}",
        f"gsm8k: paired verdicts against entropy, confidence and random: {waits}",
    ]
    random_controls = [s for s in steps if isinstance(s, Controls) and s.setting == "p"]
    assert [dict(s.pairs) for s in random_controls] == [{"random": ("learned",)}] * 2
    aimed = [s for s in steps if isinstance(s, Controls) and s.setting == "target_share"]
    assert len(aimed) == 2 and all(s.rounds == 2 for s in aimed)
    argv = aimed[0].command("entropy", 0.163)
    assert "entropy:target_share=0.163" in argv and "--limit" in argv
    assert f"entropy:calibration={tmp_path}/ed/calibration/mbpp/entropy.json" in argv
    parses(argv)
    verdicts = [s for s in steps if isinstance(s, Verdicts)]
    assert [s.to for s in verdicts] == [learned / "verdicts" / t for t in ("mbpp", "humaneval")]
    assert verdicts[0].against == ("entropy", "confidence", "random")
    assert all(progress.status(s)[0] == "after the rows" for s in [*aimed, *verdicts])


def test_edition3_steps_wait_for_a_router_whose_checkpoint_is_not_there(tmp_path):
    """Before r2r is trained, the third edition's mbpp runs learned's paired steps without it
    (entropy and confidence aimed at learned's shares alone) and r2r's verdicts wait; once its
    checkpoint is there, the same steps pair both."""
    learned, r2r = tmp_path / "learned", tmp_path / "r2r"
    (learned / "mbpp").mkdir(parents=True)
    (learned / "mbpp" / "learned.pt").write_bytes(b"")
    sets = [f"vars.learned={learned}", f"vars.r2r={r2r}"]

    def load():
        return experiment.load(ROOT / "experiments" / "edition3.toml", out=str(tmp_path / "ed"),
                               tasks=["mbpp"], sets=sets)  # fmt: skip

    steps = experiment.steps(load())
    aimed = [s for s in steps if isinstance(s, Controls) and s.setting == "target_share"]
    assert [dict(s.pairs) for s in aimed] == [{"entropy": ("learned",), "confidence": ("learned",)}]
    assert [(s.routers, s.against) for s in steps if isinstance(s, Verdicts)] == [
        (("learned",), ("entropy", "confidence", "random"))
    ]
    notes = [s.label for s in steps if isinstance(s, experiment.Note)]
    assert notes[-1] == (
        "mbpp: r2r: paired verdicts against entropy, confidence, learned and random: "
        f"waits for {r2r}/mbpp/r2r.pt"
    )
    (r2r / "mbpp").mkdir(parents=True)
    (r2r / "mbpp" / "r2r.pt").write_bytes(b"")
    steps = experiment.steps(load())
    aimed = [s for s in steps if isinstance(s, Controls) and s.setting == "target_share"]
    assert dict(aimed[0].pairs)["entropy"] == ("learned", "r2r")
    verdicts = [s for s in steps if isinstance(s, Verdicts)]
    assert verdicts[1].against == ("entropy", "confidence", "learned", "random")
    assert not [s for s in steps if isinstance(s, experiment.Note)]


@pytest.mark.parametrize("name", ["edition3", "r2r"])
def test_an_edition_publishes_its_matrix_into_the_readme(name):
    """`[publish] readme = FILE`: the publish step passes `--readme FILE`, so the README's
    headline is the site's matrix after any run that publishes, whatever tasks it ran."""
    spec = experiment.load(ROOT / "experiments" / f"{name}.toml", tasks=["humaneval"])
    publish = experiment.steps(spec)[-1]
    assert isinstance(publish, Publish)
    assert publish.argv[-4:] == ("--tasks", "humaneval", "--readme", "README.md")
    parses(publish.argv)


def test_validity_runs_only_the_tasks_it_is_given(tmp_path):
    spec = experiment.load(ROOT / "experiments" / "validity.toml", out=str(tmp_path),
                           tasks=["commonsense_qa", "cnn_dm"])  # fmt: skip
    got = [(a[a.index("--task") + 1], a[a.index("--router") + 1]) for a in commands(spec)]
    assert got == [("commonsense_qa", "small"), ("commonsense_qa", "large"),
                   ("cnn_dm", "small"), ("cnn_dm", "large")]  # fmt: skip
    assert all("--split all" in " ".join(a) for a in commands(spec) if "cnn_dm" in a)
    with pytest.raises(UserError, match="no task nope"):
        experiment.load(ROOT / "experiments" / "validity.toml", tasks=["nope"])


def test_edition2_copies_only_its_own_gpu_rows(tmp_path):
    """gsm8k's report shows this edition's rows replayed on a GPU machine, not the replays of
    rows made for the purpose."""
    spec = experiment.load(EDITION2, out=str(tmp_path / "edition2"))
    (copy,) = [s for s in experiment.steps(spec) if isinstance(s, Copy)]
    assert experiment_run.perform(copy, None, None, print) == 0
    copied = sorted(p.name for p in (tmp_path / "edition2" / "gsm8k" / "device").iterdir())
    assert copied == ["device-latency-h100-llamacpp-edition2.json"]
    assert len(list((ROOT / "docs" / "data").glob("device-latency-h100*.json"))) > 1


def test_edition2_reruns_rows_its_mbpp_sweeps_make(tmp_path):
    spec = experiment.load(EDITION2, out=str(tmp_path))
    steps = experiment.steps(spec)
    names = {f.name for s in steps if isinstance(s, Command) and s.runs and s.runs.task == "mbpp"
             for f in s.runs.folders}  # fmt: skip
    (rerun,) = [s for s in steps if isinstance(s, Command) and s.argv[0] == "rerun"]
    rows = rerun.argv[rerun.argv.index("--rows") + 1].split(",")
    assert len(rows) >= 3 and set(rows) <= names, set(rows) - names
    assert "speculative__adaptive=true" in names  # its own folder, not speculative__default's


def test_overrides_and_spec_errors(tmp_path):
    spec = experiment.load(EDITION2, out=str(tmp_path), n=7, tasks=["mbpp"],
                           sets=["models.threads=1", "rows.2.shares=[0.2]", "anchors.n=5"])  # fmt: skip
    sweeps = [a for a in commands(spec) if a[0] == "sweep"]
    assert all(a[a.index("--threads") + 1] == "1" and a[a.index("--limit") + 1] == "7"
               for a in sweeps)  # fmt: skip
    assert [a[a.index("--targets") + 1] for a in sweeps if "--targets" in a] == [
        "0.2",
        "0.1,0.2,0.35",
    ]
    assert spec.publish_to == ""  # another folder is another experiment: nothing published
    bad = tmp_path / "bad.toml"
    for text, message in (
        ('[experiment]\nout = "x"\n[row]\n', "unknown section row"),
        ('[experiment]\nname = "x"\n', "needs out"),
        ('[experiment]\nout = "x"\n[[steps]]\ncommand = "run"\nargs = { out = "{nope}" }\n',
         r"unknown variable \{nope\}"),
        ("[experiment\n", "not valid TOML"),
    ):  # fmt: skip
        bad.write_text(text)
        with pytest.raises(UserError, match=message):
            experiment.steps(experiment.load(bad))
    with pytest.raises(UserError, match="not found"):
        experiment.load(tmp_path / "missing.toml")
    bad.write_text('[experiment]\nout = "x"\n[[steps]]\ncommand = "run"\nargs = { nope = 1 }\n')
    assert main(["experiment", "plan", str(bad)]) == 2  # a command line that does not parse


# --- status ------------------------------------------------------------------------------------


def test_status_reads_runs_training_and_calibration_folders(tmp_path):
    """A run's examples done of its target with the hours left at its sessions' rate; a training
    folder's finished file and wall hours; calibrations' hours, theirs only."""
    run = tmp_path / "validity" / "gsm8k-small"
    run.mkdir(parents=True)
    manifest = {"task": "gsm8k", "task_args": {}, "split": "test", "split_seed": 0, "limit": 10,
                "sessions": [{"examples": 2, "wall_s": 360.0}, {"batch": 16}]}  # fmt: skip
    (run / "manifest.json").write_text(json.dumps(manifest))
    recs = [{"example_id": f"gsm8k/test/{i}", "error": ""} for i in range(4)]
    recs.append({"example_id": "gsm8k/test/9", "error": "boom"})  # failed: not done
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    step = Command("run", ("run",), Runs((run,), "gsm8k", (), "test", 10))
    # 6 to go at 2 examples per 360 s = 20 examples/h
    assert progress.status(step)[0] == "done 4/10, 6 to go, ~0.3 h at 20 examples/h"
    all_of_it = Command("run", ("run",), Runs((run,), "gsm8k", (), "test", 1000))
    assert progress.status(all_of_it)[0].startswith("done 4/678, 674 to go")  # gsm8k test: 678
    train = tmp_path / "train" / "citer-lf-gsm8k"
    train.mkdir(parents=True)
    (train / "citer.pt").write_bytes(b"")
    (train / "cost.jsonl").write_text(
        json.dumps({"argv": ["train-citer", "--out", str(train)], "wall_s": 5400}) + "\n"
        + json.dumps({"argv": ["train-citer", "--out", str(train)], "wall_s": 1800}) + "\n"
    )  # fmt: skip
    trained = Command("citer", ("train-citer", "--out", str(train)), done=train / "citer.pt")
    assert progress.status(trained)[0] == "done; 2.00 h so far"
    cal = tmp_path / "calibration"
    cal.mkdir()
    (cal / "entropy.json").write_text("{}")
    (cal / "cost.jsonl").write_text("".join(json.dumps(
        {"argv": ["calibrate", "--out", str(cal / f"{r}.json")], "wall_s": s}) + "\n"
        for r, s in (("entropy", 360), ("confidence", 7200))))  # fmt: skip
    entropy = Command(
        "cal", ("calibrate", "--out", str(cal / "entropy.json")), done=cal / "entropy.json"
    )
    assert progress.status(entropy)[0] == "done; 0.10 h so far"
    confidence = Command("cal", ("calibrate", "--out", str(cal / "confidence.json")),
                         done=cal / "confidence.json")  # fmt: skip
    assert progress.status(confidence)[0] == "to do (confidence.json not there yet); 2.00 h so far"


# --- matched controls --------------------------------------------------------------------------


def test_controls_aim_each_control_at_an_unmatched_share():
    """Routers with no control run within 2 points of their share get one, aimed at the middle
    of each group of such shares spanning at most 1.5 points, p interpolated between the control
    runs bracketing that share (else the nearest run's asked / realized ratio)."""
    rows = [("small", 0.0, None), ("large", 1.0, None), ("random", 0.102, 0.1),
            ("random", 0.21, 0.2), ("entropy", 0.097, 0.1), ("citer", 0.045, 0.1),
            ("reward", 0.05, 0.1), ("reward", 0.294, 0.35), ("query", 0.01, 0.1),
            ("random_query", 0.30, 0.35), ("query", 0.335, 0.35), ("oracle", 0.6, None)]  # fmt: skip
    df = pd.DataFrame(rows, columns=["router", "large_token_share", "setting_value"])
    # entropy is matched (0.102); citer 0.045 and reward 0.05 share one control aimed at 0.0475,
    # below every random run: p = 0.0475 x 0.1 / 0.102; query 0.01 is matched by small-only
    # (p = 0); the oracle is a bound, not compared
    assert controls.needed(df) == [("random", 0.047), ("random", 0.28), ("random_query", 0.391)]
    # bracketed: interpolated (a query router at 0.461, random_query runs at 0.338 and 0.491)
    rq = pd.DataFrame([("random_query", 0.338, 0.455), ("random_query", 0.491, 0.611),
                       ("query", 0.461, 0.35)], columns=df.columns)  # fmt: skip
    assert controls.needed(rq) == [("random_query", 0.58)]
    # no control run of that kind yet: p = the share (entropy now unmatched, 4.7 points from
    # citer: a group of its own)
    assert controls.needed(df[df.router != "random"])[:3] == [
        ("random", 0.048), ("random", 0.097), ("random", 0.294)]  # fmt: skip
    # a group spans at most 1.5 points: 0.20, 0.21, 0.215 share one control; 0.225 starts the next
    wide = pd.DataFrame([("entropy", s, 0.2) for s in (0.20, 0.21, 0.215, 0.225)],
                        columns=["router", "large_token_share", "setting_value"])  # fmt: skip
    assert controls.needed(wide) == [("random", 0.208), ("random", 0.225)]
    # only the routers asked for: reward's (0.05 alone now: p = 0.05 x 0.1 / 0.102)
    assert controls.needed(df, {"random": ("reward",)}) == [("random", 0.049), ("random", 0.28)]


def test_controls_resume_a_control_an_experiment_stopped_in():
    """A control run stopped part way (29 of 200 examples) comes first, to be resumed, not taken
    as done (its partial share could match the router it was aimed at); one started with
    nothing decoded (no share yet) blocks no other router."""
    rows = [("small", 0.0, None, 200), ("large", 1.0, None, 200), ("random", 0.102, 0.1, 200),
            ("random", 0.156, 0.148, 29), ("reward", 0.150, -1.2, 200),
            ("reward", 0.294, -0.7, 200), ("random", math.nan, 0.5, 0)]  # fmt: skip
    df = pd.DataFrame(rows, columns=["router", "large_token_share", "setting_value", "n"])
    df["n_failed"] = 0
    got = controls.needed(df)
    assert got[:2] == [("random", 0.148), ("random", 0.5)]  # unfinished first, to resume
    assert got[2:] == [("random", round(0.294 * 0.148 / 0.156, 3))]  # reward 0.294's control
    df.loc[df.setting_value == 0.148, "n"] = 200  # finished: nothing to resume, still matches
    assert controls.needed(df[df.n > 0]) == got[2:]


def test_controls_command_and_the_experiment_run_what_controls_asks_for(tmp_path, capsys):
    """`hybridbench controls FOLDER` prints them; an experiment's controls step runs them, a few
    rounds (the stand-in decodes nothing, so the same ones each round)."""
    from reports import load_runs
    from reports.demo import write_demo_results

    folder = tmp_path / "out" / "gsm8k"
    write_demo_results(folder, n_examples=12)
    want = controls.needed(load_runs(folder), {"random": ("reward",)})
    assert want  # the demo's reward runs are not all matched by its random ones
    assert main(["controls", str(folder), "--routers", "reward"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{c} {p}" for c, p in want]
    assert main(["controls", str(tmp_path / "nope")]) == 2
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(f'[experiment]\nout = "{tmp_path / "out"}"\n[tasks]\ngsm8k = {{ n = 12 }}\n'
                         '[[rows]]\nrouters = ["random", "reward"]\nshares = [0.2]\n'
                         'controls = "random"\n')  # fmt: skip
    spec = experiment.load(spec_file)
    (step,) = [s for s in experiment.steps(spec) if isinstance(s, Controls)]
    ran = []
    assert experiment_run.perform(step, lambda argv: ran.append(argv) or 0, None, print) == 0
    ps = [a[a.index("--router-arg") + 1] for a in ran]
    assert ps == [f"random:p={p}" for _ in range(3) for _, p in want]
    assert all(a[:3] == ("sweep", "--routers", "random") and "--limit" in a for a in ran)


def test_aimed_runs_of_other_routers_at_the_shares_they_do_not_match():
    """entropy's target share aimed at each learned row's share no entropy row matches within 2
    points, interpolated between its rows (no row of it: the share itself); a run stopped part
    way comes first, and a target share one of its runs has is not asked again."""
    rows = [("entropy", 0.097, 0.1, 200), ("entropy", 0.204, 0.2, 200),
            ("entropy", 0.356, 0.35, 200), ("learned", 0.15, 0.1, 200),
            ("learned", 0.21, 0.2, 200), ("learned", 0.30, 0.35, 200)]  # fmt: skip
    df = pd.DataFrame(rows, columns=["router", "large_token_share", "target_share", "n"])
    df["router_args"] = [json.dumps({"target_share": t, "threshold": 1.0}) for t in df.target_share]
    pairs = {"entropy": ("learned",), "confidence": ("learned",)}
    # 0.15: 0.1 + 0.053 x 0.1 / 0.107; 0.21 is matched (0.204); 0.30: 0.2 + 0.096 x 0.15 / 0.152
    assert progress.aimed(df, pairs, "target_share") == [
        ("entropy", 0.15), ("entropy", 0.295), ("confidence", 0.15), ("confidence", 0.21),
        ("confidence", 0.3)]  # fmt: skip
    stopped = pd.concat([df, pd.DataFrame([{"router": "entropy", "large_token_share": 0.16,
                         "n": 40, "router_args": '{"target_share": 0.15}'}])],
                        ignore_index=True)  # fmt: skip
    assert progress.aimed(stopped, {"entropy": ("learned",)}, "target_share") == [
        ("entropy", 0.15),
        ("entropy", 0.295),
    ]  # resumed first; 0.15 not asked again


def test_aimed_runs_cover_the_examples_of_the_row_they_match():
    """A learned row on the whole split (255) is matched only by an entropy run covering 255
    examples: the 200-example entropy row at its share does not, so entropy is aimed at it (a
    target share only a 200-example run has is asked again: that folder grows); a 200-example
    learned row is matched by the 200-example entropy row."""
    rows = [("entropy", 0.177, 0.2, 255, 255), ("entropy", 0.206, 0.224, 200, 200),
            ("learned", 0.205, 0.2, 255, 255), ("learned", 0.21, 0.2, 200, 200)]  # fmt: skip
    cols = ["router", "large_token_share", "target_share", "n", "limit"]
    df = pd.DataFrame(rows, columns=cols)
    df["router_args"] = [json.dumps({"target_share": t, "threshold": 1.0}) for t in df.target_share]
    # 0.205 at 255: interpolated between 0.177 (0.2) and 0.206 (0.224): 0.2 + 0.028 x 0.024 / 0.029
    assert progress.aimed(df, {"entropy": ("learned",)}, "target_share") == [("entropy", 0.223)]
    df.loc[1, ["n", "limit"]] = 255  # the aimed run covers 255 now: every row matched
    assert progress.aimed(df, {"entropy": ("learned",)}, "target_share") == []


def test_rows_aimed_at_another_rows_share_are_compared_with_not_subjects():
    """A row aimed at another row's share (learned at r2r's 0.327, off the sweep's grid of
    0.1 / 0.2 / 0.35) asks for no control, no aimed entropy row and no verdict of its own: it is
    the row others are compared with. A router run only at shares of its own (margin at 0.15)
    is a subject at those."""
    from types import SimpleNamespace

    rows = []
    for router, knob in [("entropy", "target_share"), ("learned", "target_share"),
                         ("r2r", "target_share"), ("random", "p")]:  # fmt: skip
        for s in (0.1, 0.2, 0.35):
            rows.append((router, knob, s, s + 0.004))
    rows += [("learned", "target_share", 0.327, 0.326), ("margin", "target_share", 0.15, 0.15)]
    df = pd.DataFrame(
        [(r, json.dumps({k: s, "threshold": 1.0}), s, share, f"{r}__{k}={s}", 200)
         for r, k, s, share in rows],
        columns=["router", "router_args", "setting_value", "large_token_share", "run", "n"],
    )  # fmt: skip
    df["n_failed"] = 0
    # learned 0.326 lies 3 points from every random and entropy row: alone, it would ask for both
    # margin's control (between random's 0.104 and 0.204 rows: 0.1 + 0.046), not learned 0.327's
    assert controls.needed(df) == [("random", 0.146)]
    assert progress.aimed(df, {"entropy": ("learned",)}, "target_share") == []
    step = SimpleNamespace(routers=("learned",), against=("entropy",))
    assert [run for run, _, _ in progress.pairs_in(step, df)] == [
        f"learned__target_share={s}" for s in (0.1, 0.2, 0.35)]  # fmt: skip
    # learned with no row at the grid: its 0.327 row is its own grid, and entropy is aimed at it
    # (between entropy's 0.204 and 0.354 rows: 0.2 + 0.122 x 0.15 / 0.15)
    lone = df[(df.router == "entropy") | (df.run == "learned__target_share=0.327")]
    assert progress.aimed(lone, {"entropy": ("learned",)}, "target_share") == [("entropy", 0.322)]


def _demo_task_folder(folder: Path) -> Path:
    """The demo's runs of one task (12 examples each), its two reward runs made by target share
    (0.2 and 0.5), every run complete."""
    from reports.demo import write_demo_results

    write_demo_results(folder, n_examples=12)
    for name, share in (("reward_threshold1", 0.2), ("reward_threshold2", 0.5)):
        manifest = json.loads((folder / name / "manifest.json").read_text())
        manifest["router_args"]["target_share"] = share
        (folder / name / "manifest.json").write_text(json.dumps(manifest))
    summary = json.loads((folder / "random_rate0.25" / "summary.json").read_text())
    summary["n_failed"] = 0  # every run holds the same 12 examples: none left to resume
    (folder / "random_rate0.25" / "summary.json").write_text(json.dumps(summary))
    return folder


def _aim_and_compare_spec(tmp_path: Path) -> Path:
    """A spec over the demo task folder in tmp_path/out: reward aimed at speculative's share,
    then reward's verdicts against random and speculative."""
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        f'[experiment]\nout = "{tmp_path / "out"}"\n[tasks]\ngsm8k = {{ n = 12 }}\n'
        '[routers]\nreward = { checkpoint = "reward.pt" }\n'
        '[[steps]]\nafter_rows = true\nname = "reward at speculative\'s share"\n'
        'controls = ["reward"]\nrouters = ["speculative"]\nsetting = "target_share"\nrounds = 2\n'
        '[[steps]]\nafter_rows = true\nname = "verdicts"\ncompare = ["random", "speculative"]\n'
        f'routers = ["reward"]\nto = "{tmp_path / "verdicts"}"\n'
    )  # fmt: skip
    return spec_file


def test_controls_and_verdicts_steps_pair_the_runs_of_a_task_folder(tmp_path):
    """A `controls = [...]` step runs other routers aimed by a setting at the shares of the rows
    they do not match, with their [routers] arguments; a `compare = [...]` step writes a paired
    verdict per matched pair (compare's status 1, the run flagged, is a verdict), then is done."""
    folder = _demo_task_folder(tmp_path / "out" / "gsm8k")
    spec_file = _aim_and_compare_spec(tmp_path)
    aimed, verdicts = experiment.steps(experiment.load(spec_file))
    ran = []
    assert experiment_run.perform(aimed, lambda argv: ran.append(argv) or 0, None, print) == 0
    # speculative 0.339, between reward's 0.174 (0.2) and 0.523 (0.5): target share 0.342
    assert [a[-1] for a in ran] == ["reward:target_share=0.342"] * 2  # nothing decoded: twice
    assert all("reward:checkpoint=reward.pt" in a and a[a.index("--limit") + 1] == "12"
               for a in ran)  # fmt: skip
    summary = json.loads((folder / "reward_threshold1" / "summary.json").read_text())
    summary["large_token_share"] = 0.2  # within 2 points of random_rate0.25's 0.208
    (folder / "reward_threshold1" / "summary.json").write_text(json.dumps(summary))
    assert not progress.is_done(verdicts)
    run = experiment_command.execute
    assert experiment_run.perform(verdicts, run, None, print) == 0
    assert [p.name for p in (tmp_path / "verdicts").iterdir()] == [
        "reward_threshold1--vs--random_rate0.25.json"
    ]
    assert "diff_ci" in json.loads(next((tmp_path / "verdicts").iterdir()).read_text())
    assert progress.is_done(verdicts)
    assert (
        progress.status(verdicts)[0]
        == "done, 1 of 1 matched pairs compared (5 with no row within 0.02)"
    )
    # `experiment verdicts`: the pair's difference, interval and test from its JSON, the
    # others said
    v = json.loads(
        (tmp_path / "verdicts" / "reward_threshold1--vs--random_rate0.25.json").read_text()
    )
    table = verdict_table.verdict_table(verdicts)
    compared = [line for line in table if "random_rate0.25 |" in line]
    lo, hi = v["diff_ci"]
    shares = (v["paired_share_new"], v["paired_share_old"])
    assert compared == [
        f"| reward_threshold1 | {shares[0]:.3f} | random_rate0.25 | {shares[1]:.3f} "
        f"(not within 2 points here) | {v['metric']} (n = 12) | "
        f"{v['paired_new']:.3f} | {v['paired_old']:.3f} | "
        f"{v['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}] | {v['p']:.3f} | {v['p']:.3f} | "
        f"{v['verdict']} |"
    ]  # one pair compared: a family of one, its Holm-adjusted p its own; both runs' quality
    # and share on the examples both scored (here all 12 of each: the share its records give,
    # not the one its summary was told, so the pair is marked as further apart than 2 points)
    assert (v["paired_new"], v["paired_old"]) == (v["quality_new"], v["quality_old"])
    records = RunFolder(folder / "reward_threshold1").lines()
    assert shares[0] == pytest.approx(large_token_share(records)) != pytest.approx(0.2)
    assert shares[1] == pytest.approx(0.208, abs=5e-4)
    assert v["test"] == "exact McNemar" and sum(v["discordant"]) > 0
    assert sum("no run within 0.02" in line for line in table) == 5
    out = tmp_path / "verdicts.md"
    argv = ["experiment", "verdicts", str(spec_file), "--md", str(out)]
    assert main(argv) == 0
    assert compared[0] in out.read_text().splitlines()
    # a verdict made while a run held fewer examples than now (a partial or shorter run) is
    # made again; a pair whose run has not finished waits for it
    made = tmp_path / "verdicts" / "reward_threshold1--vs--random_rate0.25.json"
    made.write_text(json.dumps({**v, "n_paired": 5}))
    assert not progress.is_done(verdicts)
    said = []
    assert experiment_run.perform(verdicts, run, None, said.append) == 0
    assert json.loads(made.read_text())["n_paired"] == 12 and progress.is_done(verdicts)
    (folder / "random_rate0.25" / "summary.json").unlink()
    made.unlink()
    said.clear()
    assert experiment_run.perform(verdicts, run, None, said.append) == 0
    assert "   reward_threshold1 vs random_rate0.25: waits for random_rate0.25 to finish" in said
    assert not made.exists() and not progress.is_done(verdicts)


def test_status_puts_paired_steps_after_the_rows_they_pair(tmp_path):
    """A verdicts step whose pairs are all compared reads done on the rows there so far; while a
    row of a router it pairs is not finished, `experiment status` puts it after the rows (as
    `run` takes it), and a step pairing other routers is not held back."""
    folder = _demo_task_folder(tmp_path / "out" / "gsm8k")
    summary = json.loads((folder / "reward_threshold1" / "summary.json").read_text())
    summary["large_token_share"] = 0.2  # within 2 points of random_rate0.25's 0.208
    (folder / "reward_threshold1" / "summary.json").write_text(json.dumps(summary))
    head = f'[experiment]\nout = "{tmp_path / "out"}"\n[tasks]\ngsm8k = {{ n = 12 }}\n'
    compare = (
        '[[steps]]\nafter_rows = true\nname = "verdicts"\ncompare = ["random"]\n'
        f'routers = ["reward"]\nto = "{tmp_path / "verdicts"}"\n'
    )
    (tmp_path / "spec.toml").write_text(head + compare)
    (verdicts,) = experiment.steps(experiment.load(tmp_path / "spec.toml"))
    assert experiment_run.perform(verdicts, experiment_command.execute, None, print) == 0
    assert progress.is_done(verdicts) and len(list((tmp_path / "verdicts").iterdir())) == 1
    rows = '[[rows]]\nrouters = ["random"]\nshares = [0.2]\n'  # no such run yet: 0 of 12
    other = '[[rows]]\nrouters = ["entropy"]\nshares = [0.2]\n'
    (tmp_path / "rows.toml").write_text(head + rows + compare)
    (tmp_path / "other.toml").write_text(head + other + compare)
    lines = experiment_run.report(experiment.load(tmp_path / "rows.toml"))
    assert lines[-2] == "[2/2] gsm8k: verdicts: after the rows (1 of its runs not done)"
    assert lines[-1].startswith("0 of 2 steps done")
    lines = experiment_run.report(experiment.load(tmp_path / "other.toml"))
    assert lines[-2].startswith("[2/2] gsm8k: verdicts: done, 1 of 1 matched pairs compared")
    assert lines[-1].startswith("1 of 2 steps done")
    # a controls step after the rows is not priced on the rows there so far: on them it would
    # aim a random run at reward's share (0.3, none within 2 points), which the rows may not need
    summary["large_token_share"] = 0.3
    (folder / "reward_threshold1" / "summary.json").write_text(json.dumps(summary))
    aim = '[[steps]]\nafter_rows = true\nname = "aimed"\ncontrols = ["random"]\nrouters = ["reward"]\n'
    (tmp_path / "aim.toml").write_text(head + aim)
    (step,) = experiment.steps(experiment.load(tmp_path / "aim.toml"))
    assert progress.control_needs(step)  # alone, the step needs a run
    (tmp_path / "both.toml").write_text(head + rows + aim)
    (tmp_path / "rows-only.toml").write_text(head + rows)
    lines = experiment_run.report(experiment.load(tmp_path / "both.toml"))
    assert lines[-2] == "[2/2] gsm8k: aimed: after the rows (1 of its runs not done)"
    alone = experiment_run.report(experiment.load(tmp_path / "rows-only.toml"))[-1]
    assert lines[-1] == alone.replace("0 of 1 steps", "0 of 2 steps")  # nothing more priced


def test_a_working_copy_with_new_rows_is_read_with_its_published_copy(tmp_path):
    """A committed working copy holding only the rows a later experiment added (the rest left
    the tree for the published edition) is read with the published runs it lacks: the runs a
    new row needs beside it are judged against the published ones, not missed."""
    published = _demo_task_folder(tmp_path / "pub" / "gsm8k")
    work = tmp_path / "out" / "gsm8k"
    work.mkdir(parents=True)
    new_row = next(d.name for d in published.iterdir() if d.name.startswith("speculative"))
    shutil.move(published / new_row, work / new_row)
    spec = (
        f'[experiment]\nout = "{tmp_path / "out"}"\n[tasks]\ngsm8k = {{ n = 12 }}\n'
        '[routers]\nreward = { checkpoint = "reward.pt" }\n'
        '[[steps]]\nafter_rows = true\nname = "reward at speculative\'s share"\n'
        'controls = ["reward"]\nrouters = ["speculative"]\nsetting = "target_share"\n'
    )  # fmt: skip
    (tmp_path / "spec.toml").write_text(spec + f'[publish]\nto = "{tmp_path / "pub"}"\n')
    (tmp_path / "alone.toml").write_text(spec)
    (aimed,) = experiment.steps(experiment.load(tmp_path / "spec.toml"))
    held = {d.name: d for d in progress.held_runs(work, published)}
    assert held[new_row].parent == work and held["reward_threshold1"].parent == published
    # speculative 0.339, between reward's 0.174 (0.2) and 0.523 (0.5), both published
    assert progress.control_needs(aimed) == [("reward", 0.342)]
    (alone,) = experiment.steps(experiment.load(tmp_path / "alone.toml"))
    # the working copy alone knows no reward run: it would aim blind, at the share itself
    assert progress.control_needs(alone) == [("reward", 0.339)]


def test_run_adds_the_rows_of_a_checkpoint_a_step_trained(tmp_path):
    """A row whose checkpoint is not there yet is left out; once a step of the same run makes
    it, the steps are expanded again and its calibration and row run in that run."""
    out = tmp_path / "out"
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        f'[experiment]\nout = "{out}"\n[tasks]\ngsm8k = {{ n = 2 }}\n'
        '[routers]\nciter = { path = "{out}/citer/citer.pt", calibrate = true }\n'
        '[calibration]\nanswers = "{out}/answers"\nout = "{out}/calibration"\n'
        '[[steps]]\nname = "train"\ncommand = "train-citer"\n'
        'args = { task = "gsm8k", out = "{out}/citer" }\ndone = "citer.pt"\n'
        '[[rows]]\nrouters = ["citer"]\nshares = [0.2]\n'
    )  # fmt: skip
    (out / "answers").mkdir(parents=True)
    (out / "answers" / "summary.json").write_text("{}")
    spec = experiment.load(spec_file)
    assert [type(s).__name__ for s in experiment.steps(spec)] == ["Command", "Note"]
    ran = []

    def stand_in(argv):
        ran.append(argv[0])
        if argv[0] == "train-citer":
            (out / "citer").mkdir()
            (out / "citer" / "citer.pt").write_bytes(b"")
        return 0

    said = []
    assert experiment_run.run(spec, stand_in, None, said.append) == 1  # the row decoded nothing
    assert ran == ["train-citer", "calibrate", "sweep"], said


# --- publishing --------------------------------------------------------------------------------


def test_publish_copies_runs_compressed_and_the_report_regenerates(tmp_path, capsys):
    """Run folders with their records gzip-compressed (same bytes every time), the device rows,
    the router files the runs name; the published folder's report is the one the sweep's own
    folder gives; a published task counts as done, and its runs come back to resume from."""
    from reports import write_report
    from reports.demo import write_demo_results
    from reports.publish import is_published, restore

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
    argv = ["publish", str(src.parent), str(dest), "--tasks", "demo"]
    assert main(argv) == 0
    assert not list((dest / "demo").rglob("records.jsonl"))
    gz = sorted((dest / "demo").rglob("records.jsonl.gz"))
    assert len(gz) == 10 and (dest / "demo" / "device" / "device-latency-h100.json").is_file()
    assert (dest / "demo" / "anchors" / "machine1" / "records.jsonl.gz") in gz
    first = [p.read_bytes() for p in gz]
    assert main(argv) == 0
    assert [p.read_bytes() for p in gz] == first  # no timestamp in the gzip header
    assert "not found" not in capsys.readouterr().err  # the hash is not taken for a file
    listing = json.loads((dest / "routers" / "files.json").read_text())
    ((name, entry),) = listing.items()
    assert entry["used_as"] == str(ckpt) and (dest / "routers" / name).read_bytes() == b"weights"
    want = write_report(src.parent, tmp_path / "from-src").parent / "demo" / "report"
    got = dest / "demo" / "report"
    for f in sorted(p.name for p in want.iterdir()):
        assert (got / f).read_bytes() == (want / f).read_bytes(), f
    assert is_published(src, dest / "demo")
    work = tmp_path / "work"  # the working copies left the tree: published, and restorable
    assert is_published(work, dest / "demo") and len(restore(dest / "demo", work)) == 10
    assert (work / "anchors" / "machine1" / "records.jsonl.gz").is_file()
    # published again from the restored copy (no device/ of its own): the GPU rows stay
    shutil.copytree(dest / "demo", dest / "work")  # task "work" as published, GPU rows and all
    assert main(["publish", str(tmp_path), str(dest), "--tasks", "work"]) == 0
    assert (dest / "work" / "device" / "device-latency-h100.json").is_file()
    assert main(["publish", str(src.parent), str(dest), "--tasks", "nope"]) == 2


# --- running -----------------------------------------------------------------------------------


def _steps_spec(tmp_path: Path) -> Path:
    """Three commands, each done once its file exists (`controls` parses a folder argument)."""
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[experiment]\nout = "{tmp_path / "out"}"\n' + "".join(
        f'[[steps]]\nname = "step {i}"\ncommand = "controls"\npositional = ["{{out}}/{i}"]\n'
        f'done = "{i}/done"\n' for i in range(3)))  # fmt: skip
    return spec


def test_run_skips_what_is_done_holds_the_lock_and_goes_on_after_a_failure(tmp_path):
    spec = experiment.load(_steps_spec(tmp_path))
    lock, ran, said = tmp_path / "heavy.lock", [], []

    def stand_in(argv):
        with open(lock, "a") as f:  # the experiment holds the lock while a step runs
            with pytest.raises(BlockingIOError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        ran.append(argv)
        if argv[1].endswith("/1"):
            return 2  # a failed step: reported, the next one runs
        Path(argv[1]).mkdir(parents=True)
        (Path(argv[1]) / "done").write_text("")
        return 0

    assert experiment_run.run(spec, stand_in, str(lock), said.append) == 1
    assert [a[1][-1] for a in ran] == ["0", "1", "2"]
    assert any(line.startswith("!! [2/3] step 1: exited 2") for line in said)
    ran.clear()
    assert experiment_run.run(spec, stand_in, str(lock), said.append) == 1
    assert [a[1][-1] for a in ran] == ["1"]  # the others are done
    assert experiment_run.report(spec)[-1] == "2 of 3 steps done"


def test_run_takes_a_speed_anchor_that_a_later_step_made_needed(tmp_path, monkeypatch):
    """On a machine that has decoded nothing of the task, the anchor step finds no anchor needed;
    a step after it decodes a row here, and the same run then takes this machine's anchor, once,
    before it ends (not on the next invocation)."""
    monkeypatch.setattr(progress, "machine_id", lambda: "m1")
    out = tmp_path / "out"
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        f'[experiment]\nout = "{out}"\n[tasks]\ngsm8k = {{ n = 2 }}\n[anchors]\nn = 2\n'
        '[[steps]]\nname = "a row"\ncommand = "controls"\nafter_rows = true\n'
        'positional = ["{out}/gsm8k/entropy__x"]\ndone = "gsm8k/entropy__x/summary.json"\n'
    )  # fmt: skip
    spec = experiment.load(spec_file)
    assert [type(s).__name__ for s in experiment.steps(spec)] == ["Anchor", "Command"]
    ran = []

    def stand_in(argv):
        ran.append(argv[0])
        folder = Path(argv[argv.index("--out") + 1] if "--out" in argv else argv[1])
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps({"sessions": [{"machine": {"id": "m1"}}]}))
        recs = [{"example_id": f"gsm8k/test/{i}", "error": ""} for i in range(2)]
        (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        (folder / "summary.json").write_text(json.dumps({"n": 2, "n_failed": 0}))
        return 0

    said = []
    assert experiment_run.run(spec, stand_in, None, said.append) == 0, said
    assert ran == ["controls", "run"], said  # the row, then the anchor it made needed
    assert (out / "gsm8k" / "anchors" / "m1" / "records.jsonl").is_file()
    first, again = [line for line in said if "[1/2]" in line]
    assert first.endswith(": done") and again.startswith("== "), said  # not needed, then taken
    ran.clear()
    assert experiment_run.run(spec, stand_in, None, said.append) == 0 and ran == []


def test_run_stops_cleanly_on_sigterm_and_resumes(tmp_path, monkeypatch, capsys):
    """SIGTERM in a step stops the experiment as Ctrl-C does (status 130, where it stopped);
    the same command runs the rest."""
    spec = _steps_spec(tmp_path)
    calls = []

    def stand_in(argv):
        calls.append(argv)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill -TERM` from another shell
        Path(argv[1]).mkdir(parents=True)
        (Path(argv[1]) / "done").write_text("")
        return 0

    monkeypatch.setattr(experiment_command, "execute", stand_in)
    assert main(["experiment", "run", str(spec)]) == 130
    assert len(calls) == 2 and "resumes it" in capsys.readouterr().out
    assert main(["experiment", "run", str(spec)]) == 0
    assert [a[1][-1] for a in calls] == ["0", "1", "1", "2"]  # step 1 again: it was stopped


def test_execute_runs_a_command_line_as_the_command_line_would(tmp_path, capsys):
    assert experiment_command.execute(("controls", str(tmp_path / "nope"))) == 2
    assert "error:" in capsys.readouterr().err
    assert experiment_command.execute(("controls", "--nope")) == 2


# --- rehearsals on the tiny pair ---------------------------------------------------------------


def rehearsal_sets(small, large, tmp_path) -> list[str]:
    """The tiny pair and sizes for edition2.toml: short answers (the tiny models rarely stop by
    themselves, and every step only has to run), a fixed batch (no probe per run)."""
    return [f"models.small={small}", f"models.large={large}", "models.threads=1",
            "models.batch=4", "models.n_ctx=2048", "models.max_new_tokens=16",
            f"vars.trained={tmp_path / 'train'}", "calibration.limit=3", "anchors.n=3",
            f"publish.to={tmp_path / 'published'}"]  # fmt: skip


def test_edition2_rehearsal_on_the_tiny_pair(tmp_path, capsys):
    """edition2.toml end to end on one task: small's calib answers, two calibrations, the rows
    (answers reused), this machine's speed anchor, matched controls, publishing; then a second
    run finds every step done and runs nothing."""
    small, large = tiny_gguf_pair()
    sets = rehearsal_sets(small, large, tmp_path) + ["rows.2.shares=[0.2]", "rows.3.shares=[0.2]",
                                                     "controls.rounds=1"]  # fmt: skip
    argv = ["experiment", "run", str(EDITION2), "--out", str(tmp_path / "ed"), "--n", "2",
            "--tasks", "gsm8k", "--lock", str(tmp_path / "lock"), *[x for s in sets for x in ("--set", s)]]  # fmt: skip
    rc, out = main(argv), capsys.readouterr().out
    assert rc == 0 and "!!" not in out, out[-3000:]
    task = tmp_path / "ed" / "gsm8k"
    rows = {p.name for p in task.iterdir() if (p / "summary.json").is_file()}
    assert {"small__default", "large__default", "oracle__default", "speculative__default",
            "speculative__adaptive=true", "random__p=0.2", "entropy__target_share=0.2",
            "confidence__target_share=0.2", "random_query__p=0.2"} <= rows, rows  # fmt: skip
    for name in rows:
        summary = json.loads((task / name / "summary.json").read_text())
        assert summary["n"] == 2 and summary["n_failed"] == 0, (name, summary)
    (anchor,) = (task / "anchors").iterdir()  # this machine's, named by its id
    assert json.loads((anchor / "summary.json").read_text())["n"] == 3
    cal = json.loads((tmp_path / "ed" / "calibration" / "gsm8k" / "entropy.json").read_text())
    assert cal["router"] == "entropy"
    published = tmp_path / "published" / "gsm8k"
    assert (published / "report" / "leaderboard.md").is_file()
    assert (published / "small__default" / "records.jsonl.gz").is_file()
    rc, again = main(argv), capsys.readouterr().out
    assert rc == 0 and "== " not in again and again.count(": done") >= 10, (out[-3000:], again)
    assert main(["experiment", "status", *argv[2:5], "--n", "2", "--tasks", "gsm8k",
                 *[x for s in sets for x in ("--set", s)]]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    done, total = lines[-1].split(" steps done")[0].split(" of ")
    assert done == total, lines


@pytest.mark.slow
def test_trained_routers_then_edition2_rehearsal_on_the_tiny_pair(tmp_path, capsys):
    """Both specs end to end on the tiny pair (about 15 minutes on 2 cores): what one step hands
    the next (checkpoints, calibration files, reused answers, sweep folders, the rerun compared)
    is exercised before the real pair spends days on it. The tiny models answer nothing right,
    so the query router, which learns from small's right and wrong answers, may stop with a
    clear message, and only it."""
    small, large = tiny_gguf_pair()
    models = [f"models.small={small}", f"models.large={large}", "models.threads=1",
              "models.batch=4", "models.n_ctx=4096", "models.max_new_tokens=48"]  # fmt: skip
    train = tmp_path / "train"
    sets = models + ["vars.all=4", "vars.prompts=10", "vars.layers=[1, 2]"]
    argv = ["experiment", "run", str(ROOT / "experiments" / "trained-routers.toml"),
            "--out", str(train), *[x for s in sets for x in ("--set", s)]]  # fmt: skip
    main(argv)
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("!!")]
    assert all(": query router" in line for line in failed), failed
    assert (train / "reward" / "reward.pt").is_file()  # the best of four reward models
    for task in ("gsm8k", "mbpp"):
        assert (train / f"citer-ref-{task}" / "citer.pt").is_file()
        assert (train / f"citer-lf-{task}" / "citer.pt").is_file()
        assert (train / f"{task}-calib-small" / "summary.json").is_file()

    edition = tmp_path / "edition2"
    sets = models + [f"vars.trained={train}", "calibration.limit=4", "anchors.n=5",
                     f"publish.to={tmp_path / 'published'}"]  # fmt: skip
    argv = ["experiment", "run", str(EDITION2), "--out", str(edition), "--n", "4",
            *[x for s in sets for x in ("--set", s)]]  # fmt: skip
    main(argv)
    out = capsys.readouterr().out
    # the rerun may flag a slowdown: tiny models timed on a CPU shared with other jobs
    failed = [line for line in out.splitlines() if line.startswith("!!")]
    assert all(": rerun of four rows" in line for line in failed), out[-4000:]
    for task in ("gsm8k", "mbpp", "humaneval"):
        rows = {p.name for p in (edition / task).iterdir() if (p / "summary.json").is_file()}
        assert {"small__default", "large__default", "oracle__default", "speculative__default",
                "speculative__adaptive=true"} <= rows, rows  # fmt: skip
        for router in ("random", "entropy", "confidence", "reward", "citer", "random_query"):
            assert sum(r.startswith(f"{router}__") for r in rows) >= 3, (router, rows)
        for name in rows:
            summary = json.loads((edition / task / name / "summary.json").read_text())
            assert summary["n"] == 4 and summary["n_failed"] == 0, (task, name, summary)
        (anchor,) = (edition / task / "anchors").iterdir()
        assert json.loads((anchor / "summary.json").read_text())["n"] == 5
        assert (tmp_path / "published" / task / "report" / "leaderboard.md").is_file()
    verdicts = json.loads((tmp_path / "edition2-rerun" / "mbpp" / "compare.json").read_text())
    assert len(verdicts) == 4  # the same answers: no quality change
    assert all(v["n_paired"] == 4 and v["diff_ci"] == [0.0, 0.0] for v in verdicts.values())


def test_the_trained_router_result_pages_are_what_their_commands_write(monkeypatch):
    """experiments/learned-router-verdicts.md, -heldout.md, r2r-verdicts.md, r2r-heldout.md and
    edition3-verdicts.md regenerate from the committed verdicts and training folders (`hybridbench experiment
    verdicts ... --md`, `python -m benchmarks.heldout_report results/learned --md ...`,
    `... results/r2r ...`)."""
    from benchmarks import heldout_report

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    spec = experiment.load("experiments/learned-router.toml")
    verdicts = (root / "experiments" / "learned-router-verdicts.md").read_text()
    assert verdicts == "\n".join(experiment_run.verdicts(spec))
    heldout = (root / "experiments" / "learned-router-heldout.md").read_text()
    assert heldout == "\n".join(heldout_report.report(Path("results/learned"))) + "\n"
    r2r_verdicts = (root / "experiments" / "r2r-verdicts.md").read_text()
    assert r2r_verdicts == "\n".join(
        experiment_run.verdicts(experiment.load("experiments/r2r.toml"))
    )
    edition3 = (root / "experiments" / "edition3-verdicts.md").read_text()
    assert edition3 == "\n".join(
        experiment_run.verdicts(experiment.load("experiments/edition3.toml"))
    )
    r2r = (root / "experiments" / "r2r-heldout.md").read_text()  # `... results/r2r --md ...`
    assert r2r == "\n".join(heldout_report.report(Path("results/r2r"))) + "\n"


def test_publish_refuses_to_drop_published_runs_the_working_copy_lacks(tmp_path, capsys):
    """A working copy that lacks some published runs (rows kept only in the published folder,
    or a working copy holding only what an edition added) is refused before anything is
    written, the runs named; `--replace` drops them."""
    from reports.demo import write_demo_results

    src = tmp_path / "edition" / "demo"
    write_demo_results(src, n_examples=4)
    dest = tmp_path / "published"
    argv = ["publish", str(src.parent), str(dest), "--tasks", "demo"]
    assert main(argv) == 0
    before = sorted(p.relative_to(dest) for p in dest.rglob("*") if p.is_file())
    shutil.rmtree(src / "large")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "1 run folder(s)" in err and "(large)" in err and "--replace" in err
    assert sorted(p.relative_to(dest) for p in dest.rglob("*") if p.is_file()) == before
    assert main([*argv, "--replace"]) == 0
    assert not (dest / "demo" / "large").exists() and (dest / "demo" / "small").is_dir()


def test_publishing_one_task_keeps_the_router_files_other_tasks_listed(tmp_path):
    """routers/files.json lists the files of every task published, not only the last one's."""
    from reports.publish import copy_router_files

    first, second = tmp_path / "gsm8k.json", tmp_path / "mbpp.json"
    first.write_text("{}")
    second.write_text("[]")
    dest = tmp_path / "published"
    assert copy_router_files({str(first)}, dest) == ([str(first)], [])
    assert copy_router_files({str(second)}, dest) == ([str(second)], [])
    listing = json.loads((dest / "routers" / "files.json").read_text())
    assert [v["used_as"] for v in listing.values()] == [str(first), str(second)]
    assert all((dest / "routers" / name).is_file() for name in listing)


def test_status_hours_are_this_machines(tmp_path, monkeypatch):
    """A run's hours left are at this machine's rate: its sessions here where it has some, else
    its rate elsewhere scaled by large-only's speed here over there (the task's large row and
    its speed anchor), else the rate measured elsewhere, said so."""
    monkeypatch.setattr(progress, "machine_id", lambda: "here")
    task = tmp_path / "gsm8k"
    row = task / "entropy__target_share=0.2"

    def write(folder, router, sessions, done=0):
        folder.mkdir(parents=True, exist_ok=True)
        sessions = [{"machine": {"id": m}, "examples": n, "wall_s": w, "tokens": t}
                    for m, n, w, t in sessions]  # fmt: skip
        manifest = {"router": router, "task": "gsm8k", "task_args": {}, "split": "test",
                    "split_seed": 0, "limit": 20, "sessions": sessions}  # fmt: skip
        (folder / "manifest.json").write_text(json.dumps(manifest))
        recs = [{"example_id": f"gsm8k/test/{i}", "error": ""} for i in range(done)]
        (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    write(row, "entropy", [("there", 10, 3600.0, 3000)], done=10)  # 10 examples/h there
    step = Command("run", ("run",), Runs((row,), "gsm8k", (), "test", 20))
    assert progress.status(step)[0] == (
        "done 10/20, 10 to go, ~1.0 h at 10 examples/h"
        " (measured on another machine; large-only not timed on both)"
    )
    # large-only decodes half as fast here (its anchor) as there (its row): so would the run
    write(task / "large__default", "large", [("there", 20, 3600.0, 6000)])
    write(task / "anchors" / "here", "large", [("here", 10, 3600.0, 3000)])
    assert progress.status(step)[0] == (
        "done 10/20, 10 to go, ~2.0 h at 5 examples/h"
        " (measured on another machine, scaled by large-only's speed here)"
    )
    # once the run has a session here, its own rate here: 2 examples in 1800 s
    write(row, "entropy", [("there", 10, 3600.0, 3000), ("here", 2, 1800.0, 600)], done=12)
    assert progress.status(step)[0] == "done 12/20, 8 to go, ~2.0 h at 4 examples/h"
    # a run that reused answers: its clock, not the modeled hours (the answers' decoding added)
    oracle = task / "oracle__default"
    write(oracle, "oracle", [("here", 10, 3600.0, 3000)], done=10)
    manifest = json.loads((oracle / "manifest.json").read_text())
    manifest["sessions"][0]["measured_wall_s"] = 360.0
    (oracle / "manifest.json").write_text(json.dumps(manifest))
    step = Command("run", ("run",), Runs((oracle,), "gsm8k", (), "test", 20))
    assert progress.status(step)[0] == "done 10/20, 10 to go, ~0.1 h at 100 examples/h"


def test_status_prices_runs_not_started_at_the_tasks_rows(tmp_path, monkeypatch):
    """A run with no session yet, and none in its step, is priced at the rate here of its task's
    rows of the same router, else of its target-share rows; a control run still to run (named
    by its setting) is priced the same way, or at its own rate once begun."""
    monkeypatch.setattr(progress, "machine_id", lambda: "here")
    task = tmp_path / "gsm8k"

    def write(name, examples, wall_s, done=0):
        folder = task / name
        folder.mkdir(parents=True, exist_ok=True)
        session = {"machine": {"id": "here"}, "examples": examples, "wall_s": wall_s}
        manifest = {"router": name.split("__")[0], "sessions": [session] if examples else []}
        (folder / "manifest.json").write_text(json.dumps(manifest))
        recs = [{"example_id": f"gsm8k/test/{i}", "error": ""} for i in range(done)]
        (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    write("entropy__target_share=0.2", 10, 3600.0, done=10)  # 10 examples/h here
    write("confidence__target_share=0.35", 5, 3600.0, done=5)  # 5 examples/h
    write("random__p=0.2", 20, 3600.0, done=20)  # 20 examples/h
    rows = "the rate here of the task's other rows"
    peers = f"not started: {rows}"
    new = Command(
        "rows", ("sweep",), Runs((task / "r2r__target_share=0.1",), "gsm8k", (), "test", 15)
    )
    # no r2r row: the mean of the target-share rows, 7.5 examples/h
    assert progress.status(new) == (
        f"done 0/15, 15 to go, ~2.0 h at 8 examples/h ({peers})",
        2.0,
        0,
    )
    both = Runs((task / "r2r__target_share=0.1", task / "random__p=0.3"), "gsm8k", (), "test", 15)
    text, hours, unknown = progress.status(Command("rows", ("sweep",), both))
    assert (hours, unknown) == (2.0 + 0.75, 0) and text.endswith(f"(2 not started, at {rows})")
    argv = ("sweep", "--routers", "random", "--task", "gsm8k", "--split", "test", "--limit", "15")
    examples = Runs((), "gsm8k", (), "test", 15)
    step = Controls("controls", task, {"random": ("entropy",)}, {"random": argv}, 3, examples)
    runs = progress.control_runs(step, "random", 0.175)
    assert runs.folders == (task / "random__p=0.175",) and progress.target(runs) == 15
    assert progress.runs_status(runs) == (
        f"done 0/15, 15 to go, ~0.8 h at 20 examples/h ({peers})",
        0.75,
        0,
    )
    write("random__p=0.175", 3, 3600.0, done=3)  # begun: its own rate, 3 examples/h
    assert progress.runs_status(runs) == ("done 3/15, 12 to go, ~4.0 h at 3 examples/h", 4.0, 0)
    # with no row of any router timed here, no rate: said, not guessed
    empty = Runs((tmp_path / "mbpp" / "r2r__target_share=0.1",), "mbpp", (), "test", 15)
    assert progress.runs_status(empty)[1:] == (0.0, 1)


def test_status_of_a_speed_anchor_reads_as_a_run_step(tmp_path, monkeypatch):
    """A machine that decoded a row and no large-only needs an anchor: its status says what is
    done and what is to go, as a run step's does, and where it goes."""
    monkeypatch.setattr(progress, "machine_id", lambda: "m1")
    row = tmp_path / "gsm8k" / "entropy__target_share=0.2"
    row.mkdir(parents=True)
    (row / "manifest.json").write_text(json.dumps({"sessions": [{"machine": {"id": "m1"}}]}))
    step = Anchor("anchor", tmp_path / "gsm8k", 5, ("run",))
    folder = tmp_path / "gsm8k" / "anchors" / "m1"
    assert progress.status(step) == (
        f"done 0/5, 5 to go (no rate measured yet), into {folder}",
        0.0,
        1,
    )
    folder.mkdir(parents=True)
    recs = [{"example_id": f"gsm8k/test/{i}", "error": ""} for i in range(5)]
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert progress.status(step) == (f"done 5/5, into {folder}", 0.0, 0)


def test_controls_of_rows_on_more_examples_cover_their_examples():
    """An edition whose headline rows cover the whole split (255) and its other rows the first
    200: a 255-row is matched only by a control covering 255 examples (a 200-example control at
    its share pairs on fewer examples), so one is aimed for it; a p a 200-example control already
    has is asked again at 255 (its folder resumes); the 200-example rows stay matched by the
    200-example controls, and nothing asks those to grow."""
    rows = [("small", 0.0, None, 255, 255), ("large", 1.0, None, 255, 255),
            ("random", 0.221, 0.2, 255, 255), ("random", 0.178, 0.172, 200, 200),
            ("random", 0.102, 0.1, 200, 200), ("entropy", 0.177, 0.2, 255, 255),
            ("learned", 0.205, 0.2, 255, 255), ("entropy", 0.097, 0.1, 200, 200),
            ("learned", 0.180, 0.2, 200, 200)]  # fmt: skip
    cols = ["router", "large_token_share", "setting_value", "n", "limit"]
    df = pd.DataFrame(rows, columns=cols)
    df["n_failed"] = 0
    # entropy 0.177 at 255: the 200-example random 0.178 does not cover it; aimed from the random
    # runs bracketing 0.177 (0.102 at p 0.1, 0.178 at p 0.172): p = 0.171, not a 255-run's p
    got = controls.needed(df)
    assert got == [("random", 0.171)]
    # the aim equal to a p only a 200-example run has: asked again (that folder grows to 255)
    df.loc[df.setting_value == 0.172, ["large_token_share", "setting_value"]] = (0.177, 0.171)
    assert controls.needed(df) == [("random", 0.171)]
    # once the 171 run covers 255 examples, every row is matched and the 200-rows ask nothing
    df.loc[df.setting_value == 0.171, ["n", "limit"]] = 255
    assert controls.needed(df) == []
    # a 255-row's control stopped at 230 of 255 is resumed; a 200-example control is finished
    df.loc[df.setting_value == 0.171, "n"] = 230
    assert controls.needed(df)[0] == ("random", 0.171)


def test_a_step_pairs_a_row_on_more_examples_on_the_examples_it_decodes(tmp_path):
    """An experiment on a task's first 12 examples whose folder holds a row on 20 (an edition's
    whole-split row): its aimed runs decode 12, so a 12-example run at the row's share matches
    it; asked to cover 20, the step would aim a run it can never make cover them, every time."""
    folder = _demo_task_folder(tmp_path / "out" / "gsm8k")
    aimed, _ = experiment.steps(experiment.load(_aim_and_compare_spec(tmp_path)))
    manifest = json.loads((folder / "speculative_draft_len4" / "manifest.json").read_text())
    (folder / "speculative_draft_len4" / "manifest.json").write_text(
        json.dumps({**manifest, "limit": 20}))  # fmt: skip
    summary = json.loads((folder / "reward_threshold1" / "summary.json").read_text())
    summary["large_token_share"] = 0.335  # within 2 points of speculative's 0.339
    (folder / "reward_threshold1" / "summary.json").write_text(json.dumps(summary))
    assert progress.control_needs(aimed) == []
    df = progress.task_runs(aimed.folder, aimed.published)
    assert progress.aimed(df, aimed.pairs, "target_share")  # on all 20: not covered


def test_a_status_report_reads_each_task_folder_once(tmp_path, monkeypatch):
    """`experiment status` asks for a task's rows at each of its steps; inside one report they
    are read once (outside it, every call reads the folders again)."""
    folder = _demo_task_folder(tmp_path / "out" / "gsm8k")
    spec_file = _aim_and_compare_spec(tmp_path)
    reads = []
    real = progress.load_run_dirs
    monkeypatch.setattr(progress, "load_run_dirs", lambda dirs: reads.append(dirs) or real(dirs))
    spec = experiment.load(spec_file)
    lines = experiment_run.report(spec)
    assert len(reads) == 1 and len(reads[0]) == len(list(folder.iterdir()))
    assert len(lines) == 4  # the heading, two steps, the total
    progress.task_runs(folder, None), progress.task_runs(folder, None)
    assert len(reads) == 3
