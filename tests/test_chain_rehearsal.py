"""A rehearsal of issue 13's and issue 14's chains end to end on the tiny GGUF pair (slow: about
10 minutes on the 2-core VM; `pytest -m slow tests/test_chain_rehearsal.py`).

tests/test_chain_scripts.py checks every command line the chains give; this runs them, so that
what one step hands the next (checkpoints, calibration files, reused answers, sweep folders,
the rerun for `hybridbench compare`) is exercised before the real chain spends days on it. The
sizes are tiny (a few examples a split, 48-token answers, ten reward prompts, backbones of 1 and 2
layers); the tiny models answer nothing right, so the steps that need both kinds of label (the
query router's correct / wrong) may stop with a clear message, and only those.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny import tiny_gguf_pair

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# a step the tiny pair cannot pass: the query router learns from small's answers, all wrong here
ALLOWED_FAILURES = ("train-query",)


def chain(script: str, env: dict) -> list[str]:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / script)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout.splitlines()


def test_issue13_then_issue14_on_the_tiny_pair(tmp_path):
    small, large = tiny_gguf_pair()
    # short answers: the tiny models rarely stop by themselves, and every step only has to run
    model_args = f"--small {small} --large {large} --n-ctx 4096 --max-new-tokens 48"
    env = dict(
        os.environ,
        PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
        VIRTUAL_ENV=os.environ.get("VIRTUAL_ENV", sys.prefix),
        PYTHONPATH=str(ROOT),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        LOCK=str(tmp_path / "lock"),
        THREADS="1",
        MODEL_ARGS=model_args,
        ALL="4",
        PROMPTS="10",
        LAYERS="1 2",
        LIMIT="4",
        ANCHOR="5",  # more than LIMIT: large's row is too short, so each task gets an anchor
        TRAINED=str(tmp_path / "train13"),
    )
    log13 = chain("issue13_runs.sh", {**env, "OUT": str(tmp_path / "train13")})
    failed = [line for line in log13 if line.startswith("!!")]
    assert all(any(f" {s} " in line for s in ALLOWED_FAILURES) for line in failed), failed
    train = tmp_path / "train13"
    assert (train / "reward" / "reward.pt").is_file()  # the best of four reward models
    for task in ("gsm8k", "mbpp"):
        assert (train / f"citer-ref-{task}" / "citer.pt").is_file()
        assert (train / f"citer-lf-{task}" / "citer.pt").is_file()
        assert (train / f"{task}-calib-small" / "summary.json").is_file()
    # the early look at label-free round 2's answers reads what the chain left
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "round2_quality.py"), str(train / "citer-lf-gsm8k"),
         "--small-records", str(train / "gsm8k-train-small" / "records.jsonl")],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "4 round-2 answers" in out and "all: n = 4: round 2 0.000, small 0.000" in out, out

    edition = tmp_path / "edition2"
    common = {**env, "OUT": str(edition)}
    subprocess.run(["bash", str(ROOT / "scripts" / "issue14_runs.sh"), "--collect"],
                   cwd=ROOT, env=common, check=True, capture_output=True)  # fmt: skip
    log14 = chain("issue14_runs.sh", common)
    failed = [line for line in log14 if line.startswith("!!")]
    assert not failed, "\n".join(failed)
    for task in ("gsm8k", "mbpp", "humaneval"):
        rows = {p.name for p in (edition / task).iterdir() if (p / "summary.json").is_file()}
        assert {"small__default", "large__default", "oracle__default", "speculative__default",
                "speculative__adaptive=true"} <= rows, rows  # fmt: skip
        for router in ("random", "entropy", "confidence", "reward", "citer", "random_query"):
            assert sum(r.startswith(f"{router}__") for r in rows) >= 3, (router, rows)
        for name in rows:
            summary = json.loads((edition / task / name / "summary.json").read_text())
            assert summary["n"] == 4 and summary["n_failed"] == 0, (task, name, summary)
        (anchor,) = (edition / task / "anchors").iterdir()  # this machine's, named by its id
        summary = json.loads((anchor / "summary.json").read_text())
        assert summary["router"] == "large" and summary["n"] == 5, summary
    # the report of every task, and the rerun of four mbpp rows compared with the originals
    for task in ("gsm8k", "mbpp", "humaneval"):
        done = subprocess.run([sys.executable, "-m", "harness.cli.main", "report", str(edition / task)],
                              env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        (anchor,) = (edition / task / "anchors").iterdir()
        md = (edition / task / "report" / "leaderboard.md").read_text()
        large = md.split("### Large-only on each machine")[1].split("###")[0]
        # both large-only runs pooled on the one machine (their sessions quiet or not, as the
        # CPU beside this test happened to be)
        pooled = rf"\| A \| anchors/{anchor.name} \(5\); large__default \(4\) \| [^|]+ \| 9 \|"
        assert re.search(pooled, large), large
    verdicts = json.loads((tmp_path / "edition2-rerun" / "mbpp" / "compare.json").read_text())
    assert len(verdicts) == 4
    assert all(v["n_paired"] == 4 and v["diff_ci"] == [0.0, 0.0] for v in verdicts.values())
