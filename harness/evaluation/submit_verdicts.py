"""The verdict pages of a submission (`hybridbench submit`): its new rows against their matched
control and against the published routers at the same share, each paired by example id, with
the exact test's p Holm-adjusted over the submission's comparisons (`harness.metrics.verdicts`),
written to OUT/submission.md and at the top of the board's report."""

from __future__ import annotations

import html
from pathlib import Path

from harness.core.run_folder import RunFolder
from harness.metrics import verdicts
from reports import load_runs
from reports.render import html_table, md_table
from reports.tables import ENDS, Table, control_of
from reports.text import COMPARISON_HEADER, MATCH, comparison_cells, nearest_share, quality_cell

NEW = "submitted-"  # prefix of the new run folders on the board
# routers that are no rival of a submission: the bounds and the controls
NOT_RIVALS = ("small", "large", "random", "random_query", "oracle", "speculative")


def verdict_tables(board: Path, router: str) -> list[Table]:
    """The new rows against their matched control and against the published routers at the
    same share (within MATCH), each paired by example id on the examples both scored, the
    exact test's p Holm-adjusted over the submission's family: every distinct comparison its
    tables make (each row against its control, and against every published router within
    MATCH; the best-router table repeats the latter's)."""
    df = load_runs(board)
    mine = df[df["run"].str.startswith(NEW) & (df["router"] == router)]
    published = df[~df["run"].str.startswith(NEW)]
    rivals = published[~published["router"].isin(NOT_RIVALS)]
    if "transfer" in rivals:  # routers trained on another task: listed apart in the edition
        rivals = rivals[~rivals["transfer"].fillna(False).astype(bool)]
    records = {p: RunFolder(p).lines() for p in df["path"]}
    tested: dict[tuple[str, str], verdicts.Comparison] = {}

    def test(r, other) -> tuple[str, str]:  # its key in `tested`; compared once
        key = (r["path"], other["path"])
        if key not in tested:
            tested[key] = verdicts.compare_records(records[key[0]], records[key[1]], r["metric"])
        return key

    control_rows, best_rows, every_rows = [], [], []
    for _, r in mine.sort_values("large_token_share").iterrows():
        me = (router, r["setting"] or "—", f"{r['large_token_share']:.3f}")
        near, gap = nearest_share(
            df[df["router"].isin([control_of(router), *ENDS])], r["large_token_share"]
        )
        if near is not None:
            c = df.loc[near]
            matched = "" if gap <= MATCH else " (not matched)"
            control_rows.append(
                (
                    (
                        *me,
                        quality_cell(r),
                        f"{c['router']} {c['setting']}".strip(),
                        f"{c['large_token_share']:.3f}{matched}",
                    ),
                    test(r, c),
                )
            )
        near = rivals[(rivals["large_token_share"] - r["large_token_share"]).abs() <= MATCH]
        near = near.sort_values(["quality", "run"], ascending=[False, True])
        if not len(near):
            best_rows.append(
                ((*me, quality_cell(r), "no published router within 2 points", "—", "—"), None)
            )
        for i, (_, b) in enumerate(near.iterrows()):
            cells = (
                f"{b['router']} {b['setting']}".strip(),
                f"{b['large_token_share']:.3f}",
                quality_cell(b),
            )
            if i == 0:
                best_rows.append(((*me, quality_cell(r), *cells), test(r, b)))
            every_rows.append(((*me, *cells), test(r, b)))
    adjusted = dict(zip(tested, verdicts.family(list(tested.values())), strict=True))

    def rows(entries) -> tuple[tuple[str, ...], ...]:
        c = [adjusted.get(key, verdicts.NOTHING) for _, key in entries]
        return tuple(
            (*cells, str(t.n) if key else "—", *comparison_cells(t))
            for (cells, key), t in zip(entries, c, strict=True)
        )

    head = ("router", "setting", "large token share")
    pairing = ("paired n", *COMPARISON_HEADER)
    return [
        Table(
            "Submitted rows vs their matched control",
            (*head, "quality [95% CI]", "control", "its share", *pairing),
            rows(control_rows),
        ),
        Table(
            "Submitted rows vs the best published router at the same share (within 2 points)",
            (
                *head,
                "quality [95% CI]",
                "published router",
                "its share",
                "its quality [95% CI]",
                *pairing,
            ),
            rows(best_rows),
        ),
        Table(
            "Submitted rows vs every published router within 2 points",
            (*head, "published router", "its share", "its quality [95% CI]", *pairing),
            rows(every_rows),
        ),
    ]


INTRO = (
    "This leaderboard holds the edition's published rows and a submission's new rows (run "
    "folders named {new}...). The submission ran on the edition's {n} {split} examples of "
    "{task}, with the same models (sha256), decoding and backends; each comparison below is "
    "paired by example id on the examples both rows scored (paired n): the difference of the "
    "primary metric with its 95% paired bootstrap interval ({n_boot:,} resamples, seed {seed}), "
    "the exact McNemar test's p on the discordant pairs (a bootstrap p for a graded metric) and "
    "that p Holm-adjusted over the submission's comparisons (each row against its control and "
    "every published router within 2 points); better / worse: the adjusted p is below "
    "{alpha:g}. A control or rival is matched when its large-token share is within 2 points."
)


def write_section(out: Path, report: Path, ed, tables: list[Table], notes) -> None:
    """OUT/submission.md, and the same section at the top of the report's Markdown and HTML;
    `ed`: the edition submitted to (`harness.evaluation.submit.Edition`)."""
    intro = INTRO.format(
        new=NEW,
        n=len(ed.example_ids),
        split=ed.split,
        task=ed.task,
        n_boot=verdicts.N_BOOT,
        seed=verdicts.SEED,
        alpha=verdicts.ALPHA,
    )
    lines = ["## Submission", "", intro, *([""] + [f"- note: {n}" for n in notes] if notes else [])]
    body = ["<h2>Submission</h2>", f"<p>{html.escape(intro)}</p>"]
    body += [f"<p>note: {html.escape(n)}</p>" for n in notes]
    for t in tables:
        lines += ["", f"### {t.title}", "", md_table(t)]
        body += [f"<h3>{html.escape(t.title)}</h3>", html_table(t)]
    section = "\n".join(lines) + "\n"
    link = f"\nThe whole leaderboard: [{report.name}](report/{report.name}).\n"
    (out / "submission.md").write_text(f"# Submission to {ed.folder}\n\n{section}{link}")
    md = report.with_suffix(".md")
    if md.is_file():
        head, _, rest = md.read_text().partition("\n")
        md.write_text(f"{head}\n\n{section}{rest}")
    page = report.read_text()
    at = page.find("</h1>") + len("</h1>") if "</h1>" in page else page.find("<body>") + 6
    report.write_text(page[:at] + "\n" + "\n".join(body) + page[at:])
