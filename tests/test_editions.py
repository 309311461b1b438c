"""A task page whose rows scored different numbers of examples (a whole-split edition beside
rows kept at an earlier edition's n), and the verdicts that differ between two editions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.core.run_folder import RunFolder
from harness.metrics.frontier import pgr
from harness.metrics.quality import summarize
from reports.demo import write_demo_results
from reports.editions import changed_verdicts, page_verdicts
from reports.leaderboard import write_report
from reports.site import GoalEntry, _cell

N, FEWER = 12, 5


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return write_demo_results(tmp_path_factory.mktemp("results"), n_examples=N)


def _rewrite(run: Path, records: list[dict]) -> None:
    """Replace a run's records (and its summary, and its manifest's limit)."""
    folder = RunFolder(run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["limit"] = len({r["example_id"] for r in records})
    folder.write_manifest(manifest)
    (run / "records.jsonl").unlink()
    folder.write_records(records)
    folder.write_summary(summarize(records, manifest))


def _mean(run: Path, ids: set[str]) -> float:
    scores = [r["scores"]["exact_match"] for r in RunFolder(run).lines() if r["example_id"] in ids]
    return sum(scores) / len(scores)


def test_a_row_on_fewer_examples_is_measured_on_its_own_examples(results, tmp_path):
    """A reward row keeps the first 5 of 12 examples: its gap recovered is against small-only
    and large-only on those 5 (not on all 12), the page marks it n = 5 and says why."""
    copy = tmp_path / "mixed"
    shutil.copytree(results, copy)
    spec = copy / "reward_threshold1"
    kept = [r for r in RunFolder(spec).lines() if int(r["example_id"][2:]) < FEWER]
    _rewrite(spec, kept)
    ids = {r["example_id"] for r in kept}
    q = _mean(spec, ids)
    own = pgr(q, _mean(copy / "small", ids), _mean(copy / "large", ids))
    whole = pgr(
        q,
        _mean(copy / "small", set(map("ex{}".format, range(N)))),
        _mean(copy / "large", set(map("ex{}".format, range(N)))),
    )
    assert abs(own - whole) > 1e-3  # the two readings differ on this seed, so the test can tell
    md = (write_report(copy, tmp_path / "report").parent / "leaderboard.md").read_text()
    assert f"the rows marked n = {FEWER} scored the first {FEWER} of them, the others all {N}" in md
    goal = md.split("### Quality goal")[1].split("###")[0]
    row = next(x for x in goal.splitlines() if x.startswith("| reward |"))
    assert row.split("|")[2].strip() == f"{own:.1%} (n = {FEWER})"
    # every other row scored all 12: no mark, the task's references
    assert sum("(n = " in x for x in goal.splitlines()) == 1
    # the paired verdict is on the examples both scored
    (verdict,) = [v for v in page_verdicts(copy).values() if v.run == spec.name]
    assert verdict.pairing.n == FEWER
    # unmixed, the page reads as before: one sentence on the references
    plain = (write_report(results, tmp_path / "plain").parent / "leaderboard.md").read_text()
    assert f"on {N} test examples, the same for every run." in plain and "(n = " not in plain


def test_the_index_cell_marks_a_row_on_fewer_examples():
    entry = GoalEntry("learned", False, "target 20%", 0.2, 0.5, "better", "0.70", "—", fewer=200)
    assert _cell(entry) == "50.0% (n = 200) · better · 0.70×"
    assert "(n = " not in _cell(GoalEntry("entropy", False, "", 0.2, 0.5, "better", "0.7", "—"))


def test_edition_changes_lists_the_verdicts_that_changed(tmp_path, capsys):
    """One row made wrong on every example in the newer edition: its verdict against its
    control changes to worse, and only the verdicts that changed are listed, with both."""
    from harness.cli.main import main

    old = tmp_path / "old"
    write_demo_results(old / "demo", n_examples=40)
    new = tmp_path / "new" / "demo"
    shutil.copytree(old / "demo", new)
    run = new / "reward_threshold1"
    records = [
        {**r, "scores": {"exact_match": 0.0}} for r in RunFolder(run).lines() if not r["error"]
    ]
    _rewrite(run, records)
    before, after = page_verdicts(old / "demo"), page_verdicts(new)
    assert before[run.name].pairing.verdict != "worse" == after[run.name].pairing.verdict
    changed = {k for k in after if after[k].pairing.verdict != before[k].pairing.verdict}
    table, both = changed_verdicts(old, tmp_path / "new", ["demo"])
    assert both == len(before) and len(table.rows) == len(changed) >= 1
    row = next(r for r in table.rows if r[1] == after[run.name].row)
    assert row[0] == "demo" and row[-1] == "worse" and row[7] == before[run.name].pairing.verdict
    md = tmp_path / "changes.md"
    assert (
        main(
            ["edition-changes", str(old), str(tmp_path / "new"), "--tasks", "demo", "--md", str(md)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out == md.read_text() and f"{len(changed)} of the {both} verdicts" in out
    assert main(["edition-changes", str(old), str(old), "--tasks", "demo"]) == 0
    assert capsys.readouterr().out == f"0 of the {both} verdicts both editions give changed.\n"
    assert main(["edition-changes", str(old), str(tmp_path / "nowhere"), "--tasks", "demo"]) == 2


def test_the_edition_page_lists_the_whole_split_rows_of_each_task(results, tmp_path):
    """`python -m reports.edition_rows FOLDER`: the runs on as many examples as large-only
    (references and random first), each with its interval, share and hours; a run kept at
    fewer examples is left out; --write puts the table into a page's block, --check compares."""
    from reports.edition_rows import main as edition_rows
    from reports.edition_rows import whole_split_rows

    copy = tmp_path / "mixed"
    shutil.copytree(results, copy)
    spec = copy / "reward_threshold1"
    _rewrite(spec, [r for r in RunFolder(spec).lines() if int(r["example_id"][2:]) < FEWER])
    table = whole_split_rows(copy)
    runs = [line.split(" | ")[0][2:] for line in table[2:]]
    assert spec.name not in runs and len(runs) == len(list(copy.glob("*/manifest.json"))) - 1
    assert runs[:2] == ["small", "large"]  # the references first
    summary = json.loads((copy / "large" / "summary.json").read_text())
    lo, hi = summary["quality_ci_low"], summary["quality_ci_high"]
    assert table[3].startswith(f"| large | {summary['quality']:.3f} [{lo:.3f}, {hi:.3f}] | 1.000 |")
    page = tmp_path / "edition.md"
    page.write_text("# Edition\n\n<!-- rows: mixed -->\n| old |\n<!-- /rows -->\n\nAfter.\n")
    assert edition_rows([str(copy), "--check", str(page)]) == 1
    assert edition_rows([str(copy), "--write", str(page)]) == 0
    assert edition_rows([str(copy), "--check", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Edition\n\n<!-- rows: mixed -->\n| row |") and "| old |" not in text
    assert text.endswith("<!-- /rows -->\n\nAfter.\n")
    assert edition_rows([str(results), "--check", str(page)]) == 2  # no block for its name


def test_docs_edition_tables_are_the_published_rows():
    """Each `<!-- rows: TASK -->` table of docs/edition.md is reports/published/TASK's."""
    from reports.edition_rows import whole_split_rows, written

    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "edition.md").read_text(encoding="utf-8")
    marks = [x.strip() for x in text.splitlines() if x.strip().startswith("<!-- rows: ")]
    tasks = [x.removeprefix("<!-- rows: ").removesuffix(" -->") for x in marks]
    assert tasks, "docs/edition.md has no rows table"
    for task in tasks:
        assert written(text, task) == whole_split_rows(root / "reports" / "published" / task), (
            f"docs/edition.md's {task} rows differ: python -m reports.edition_rows "
            f"reports/published/{task} --write docs/edition.md"
        )
