"""`hybridbench submit` against a tiny "published" edition built here (the tiny pair as GGUF files
on llama.cpp, a JSONL task, small/large/random/entropy rows): a third party's router placed
among the published rows with paired verdicts, matched controls only where the edition has
none, a speed anchor, a resume; and each refusal (task, split, examples, decoding, backend,
models), made before anything is decoded."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from harness.cli.main import main
from harness.core.run_folder import RunFolder
from harness.evaluation.submit import NEW, read_edition
from harness.metrics.verdicts import compare_records
from reports.text import p_cell
from routers.score import ScoreRouter
from tests.tiny import tiny_gguf_pair

MARGIN = "tests.test_submit:Margin"
MATCH = 0.02


class Margin(ScoreRouter):
    """The router submitted: defers where small's top-2 probability margin is small."""

    name = "margin"
    defers_below = True
    default_threshold = 0.2

    def token_scores(self, view):
        top2 = torch.softmax(view.small_logits.float(), -1).topk(2, dim=-1).values
        return top2[:, 0] - top2[:, 1]


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    """(edition folder, model arguments, data file): a sweep of the tiny pair, as published."""
    root = tmp_path_factory.mktemp("edition")
    data = root / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "reference": 2 * i}) + "\n"
                            for i in range(60)))  # fmt: skip
    small, large = tiny_gguf_pair()
    models = ["--small", str(small), "--large", str(large), "--backend", "llama.cpp",
              "--threads", "1", "--n-ctx", "512", "--batch", "1"]  # fmt: skip
    task = ["--task", "jsonl", "--task-arg", f"path={data}", "--task-arg", "scorer=numeric"]
    cal = root / "entropy.json"
    argv = ["calibrate", "--router", "entropy", *task, "--limit", "4", "--max-new-tokens", "6",
            "--out", str(cal), *models]  # fmt: skip
    assert main(argv) == 0
    folder = root / "sums"
    argv = ["sweep", *task, "--routers", "small,large,random,entropy", "--targets", "0.2,0.5",
            "--router-arg", f"entropy:calibration={cal}", "--limit", "6", "--max-new-tokens",
            "6", "--out", str(folder), *models]  # fmt: skip
    assert main(argv) == 0
    return folder, models, data


def submit_argv(edition, out, *extra, models=None):
    folder, pair, _ = edition
    return ["submit", "--router", MARGIN, "--edition", str(folder), "--out", str(out),
            "--anchor-limit", "2", *(pair if models is None else models), *extra]  # fmt: skip


def shares(folder) -> dict[str, float]:
    """run folder name -> its large-token share."""
    return {d.name: json.loads((d / "summary.json").read_text())["large_token_share"]
            for d in folder.iterdir() if (d / "summary.json").is_file()}  # fmt: skip


def test_submit_puts_the_router_among_the_published_rows(edition, tmp_path, capsys):
    folder = edition[0]
    ed = read_edition(folder)
    assert ed.task == "sums" and ed.task_ref == "jsonl" and ed.shares == (0.2, 0.5)
    out = tmp_path / "sub"
    assert main(submit_argv(edition, out)) == 0
    cal = json.loads((out / "calibration.json").read_text())
    assert cal["router_class"] == MARGIN and cal["split"] == "calib"
    runs = shares(out / "runs")
    rows = {n: s for n, s in runs.items() if n.startswith("tests.test_submit-Margin__")}
    assert sorted(rows) == [f"tests.test_submit-Margin__target_share={s}" for s in ("0.2", "0.5")]
    for name in rows:  # the edition's examples, its decoding, the router at its shares
        m = json.loads((out / "runs" / name / "manifest.json").read_text())
        assert m["decode"] == ed.decode and m["split"] == ed.split and m["task"] == "sums"
        ids = sorted(r["example_id"] for r in RunFolder(out / "runs" / name).lines())
        assert tuple(ids) == ed.example_ids
    # a control was added only where the edition had none within 2 points of a row's share:
    # aimed at that share, and aimed once more where it missed (a 6-token answer's share moves
    # in steps of 1/6, so here it may miss twice: its verdict then says "not matched")
    published = {n: s for n, s in shares(folder).items()
                 if n.split("__")[0] in ("random", "small", "large")}  # fmt: skip
    added = {float(n.split("=")[1]) for n in runs if n.startswith("random__")}
    unmatched = [s for s in rows.values()
                 if not any(abs(p - s) <= MATCH for p in published.values())]  # fmt: skip
    assert {round(s, 3) for s in unmatched} <= added
    assert len(added) <= 2 * len(unmatched)
    # the speed anchor: large-only on this machine
    (anchor,) = (out / "anchors").iterdir()
    assert json.loads((anchor / "summary.json").read_text())["n"] == 2
    assert json.loads((anchor / "manifest.json").read_text())["router"] == "large"
    # the board links the edition's runs and the new ones; the report shows both
    board = sorted(p.name for p in (out / "board").iterdir())
    assert {f"{NEW}{n}" for n in runs} <= set(board) and "entropy__target_share=0.2" in board
    links = [p for p in (out / "board").rglob("*") if p.is_symlink()]
    assert links and all(not os.path.isabs(os.readlink(p)) and p.is_dir() for p in links)
    md = (out / "report" / "leaderboard.md").read_text()
    assert "## Submission" in md and MARGIN in md and "entropy" in md
    assert "<h2>Submission</h2>" in (out / "report" / "leaderboard.html").read_text()
    sub = json.loads((out / "submission.json").read_text())
    control, best, every = sub["verdicts"]
    assert len(control["rows"]) == 2 and all(r[0] == MARGIN for r in control["rows"])
    # each verdict is the paired difference on the edition's examples, recomputed here
    for row in control["rows"]:
        mine = next(n for n, s in rows.items() if f"{s:.3f}" == row[2])
        theirs = next(n for n in board if n.split("__")[0] == row[4].split(" ")[0]
                      and f"{shares(out / 'board')[n]:.3f}" == row[5].split(" ")[0])  # fmt: skip
        d = compare_records(
            RunFolder(out / "runs" / mine).lines(),
            RunFolder(out / "board" / theirs).lines(),
            "exact_match",
        )
        assert row[6] == str(len(ed.example_ids)) == str(d.n)
        assert row[7] == f"{d.diff:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}]"
        assert row[8] == p_cell(d.p)  # the exact test's p; row[9] Holm-adjusted, row[10] verdict
    # each verdict is its Holm-adjusted p's (never below the p alone) and its difference's sign
    for row in [*control["rows"], *best["rows"], *every["rows"]]:
        p, adjusted, said = row[-3:]
        assert adjusted == "—" or float(adjusted.lstrip("<")) >= float(p.lstrip("<"))
        small = adjusted != "—" and float(adjusted.lstrip("<")) < 0.05
        assert said == (
            "—"
            if adjusted == "—"
            else "no difference"
            if not small
            else "better"
            if row[-4].startswith("+")
            else "worse"
        )
    for row in every["rows"]:  # rivals: published routers within 2 points, no controls
        assert row[3].split(" ")[0] == "entropy"
        assert abs(float(row[2]) - float(row[4])) <= MATCH
    assert len(best["rows"]) == 2

    # the same command again resumes: nothing decoded twice
    sessions = {n: len(json.loads((out / "runs" / n / "manifest.json").read_text())["sessions"])
                for n in runs}  # fmt: skip
    capsys.readouterr()
    assert main(submit_argv(edition, out)) == 0
    assert "calibration.json: reused" in capsys.readouterr().err
    for n, count in sessions.items():
        m = json.loads((out / "runs" / n / "manifest.json").read_text())
        assert len(m["sessions"]) == count
    # --verdicts-only writes the verdicts again from the run folders, no model loaded
    written = (out / "submission.json").read_text()
    (out / "submission.json").write_text(json.dumps({**json.loads(written), "verdicts": []}))
    again = ["submit", "--router", MARGIN, "--edition", str(edition[0]), "--out", str(out)]
    assert main([*again, "--verdicts-only"]) == 0
    assert (out / "submission.json").read_text() == written
    assert all(
        len(json.loads((out / "runs" / n / "manifest.json").read_text())["sessions"]) == count
        for n, count in sessions.items()
    )
    assert main([*again[:-1], str(tmp_path / "none"), "--verdicts-only"]) == 2
    assert "submission.json not found" in capsys.readouterr().err


def test_a_submission_inside_a_checkout_resumes_from_another_copy_of_it(
    edition, tmp_path, monkeypatch, capsys
):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    monkeypatch.chdir(first)
    assert main(submit_argv(edition, "results/sub")) == 0
    shutil.copytree(first / "results", second / "results")  # the folder, committed and cloned
    monkeypatch.chdir(second)
    capsys.readouterr()
    assert main(submit_argv(edition, "results/sub")) == 0  # resumed: same identity, nothing new
    assert "calibration.json: reused" in capsys.readouterr().err
    for m in (second / "results" / "sub" / "runs").glob("*/manifest.json"):
        manifest = json.loads(m.read_text())
        assert len(manifest["sessions"]) == 1
        if "calibration" in manifest["router_args"]:
            assert manifest["router_args"]["calibration"] == "results/sub/calibration.json"


@pytest.mark.parametrize(
    "extra, said",
    [
        (
            ["--max-new-tokens", "7"],
            "decoding (max_new_tokens) differs from the edition's: 7 here, 6",
        ),
        (["--temperature", "0.5"], "decoding (temperature) differs from the edition's: 0.5 here"),
        (["--task", "gsm8k"], "the task differs from the edition's: gsm8k here, sums there"),
        (["--split", "calib"], "the split differs from the edition's: calib here, test there"),
    ],
)
def test_submit_refuses_another_task_split_or_decoding(edition, tmp_path, capsys, extra, said):
    out = tmp_path / "sub"
    assert main(submit_argv(edition, out, *extra)) == 2
    assert said in capsys.readouterr().err
    assert not (out / "runs").exists()


def test_submit_refuses_another_backend_or_other_models(edition, tmp_path, capsys):
    out = tmp_path / "sub"
    models = edition[1]
    hf = [*models[: models.index("--backend")], "--backend", "hf", "--dtype", "float32"]
    assert main(submit_argv(edition, out, models=hf)) == 2
    assert "small's backend differs from the edition's: hf here, llama.cpp there" in (
        capsys.readouterr().err
    )
    small, large = tiny_gguf_pair(seed=3)  # the same shapes, other weights
    other = [*models]
    other[1], other[3] = str(small), str(large)
    assert main(submit_argv(edition, out, models=other)) == 2
    assert "the small model (sha256) differs from the edition's" in capsys.readouterr().err
    assert not (out / "runs").exists()


def test_submit_refuses_an_edition_whose_examples_differ_here(edition, tmp_path, capsys):
    folder = edition[0]
    moved = tmp_path / "edition"
    shutil.copytree(folder, moved, symlinks=True)
    other = tmp_path / "sums.jsonl"  # the same task's file, rows since changed
    other.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "reference": 2 * i}) + "\n"
                             for i in range(30, 90)))  # fmt: skip
    for manifest in moved.glob("*/manifest.json"):
        m = json.loads(manifest.read_text())
        m["task_args"]["path"] = str(other)
        manifest.write_text(json.dumps(m))
    out = tmp_path / "sub"
    assert main(submit_argv((moved, *edition[1:]), out)) == 2
    assert "test examples here are not the edition's" in capsys.readouterr().err
    assert main(submit_argv((tmp_path, *edition[1:]), out)) == 2
    assert "is not a published task folder" in capsys.readouterr().err
    assert not (out / "runs").exists()


def test_the_published_editions_are_readable_as_editions():
    """The committed editions are what `submit` pairs with: one task, split, decoding and model
    pair each, and their target shares."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "reports" / "published"
    for task, n in (("gsm8k", 200), ("mbpp", 255), ("humaneval", 85)):  # large-only's examples
        ed = read_edition(root / task)
        assert ed.task == task and ed.split == "test" and len(ed.example_ids) == n
        assert ed.shares == (0.1, 0.2, 0.35) and ed.backends == {"small": "llama.cpp",
                                                                 "large": "llama.cpp"}  # fmt: skip
        assert all(len(m["sha256"]) == 64 for m in ed.models.values())


@pytest.mark.parametrize("task", ["gsm8k", "mbpp"])
def test_the_example_readme_quotes_its_submission(task):
    """Each figure of the example README's submission table is the submission's own: the margin
    row's share and quality, and each paired difference with its rival's share, as
    results/submit-margin-TASK/submission.json has them."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "examples" / "margin-router" / "README.md").read_text()
    section = readme.split(f"published {task} edition", 1)[1].split("\n### ", 1)[0]
    sub = json.loads((root / "results" / f"submit-margin-{task}" / "submission.json").read_text())
    control, best, every = sub["verdicts"]
    pairs = {(r[2], r[4].split()[0], r[5], r[7]) for r in control["rows"]}
    pairs |= {(r[2], r[3].split()[0], r[4], r[7]) for r in every["rows"]}
    quality = {r[2]: r[3] for r in control["rows"]}
    table = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    rivals = [c.split()[1] for c in table[0][3:]]  # "vs random (share)" -> random
    rows = [r for r in table if r[0].strip().startswith("0.")]
    assert len(rows) == len(sub["shares"]) == 3 and {"random", "entropy"} <= set(rivals)
    for cells in rows:
        share, q, *diffs = (c.strip() for c in cells[1:])
        assert quality[share] == q
        for rival, cell in zip(rivals, diffs, strict=True):
            diff, theirs = cell.rsplit(" (", 1)
            assert (share, rival, theirs.rstrip(")"), diff) in pairs, cell
