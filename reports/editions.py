"""What changed between two editions of a leaderboard: every paired verdict of a task page
(each run against its control at the nearest share, Holm-adjusted over the page's family, as
`reports.tables.TaskRuns.pairing` gives it) read from both editions' run folders, and the rows
whose verdict word differs, with both numbers side by side.

    hybridbench edition-changes OLD NEW --tasks gsm8k,mbpp [--md FILE]

OLD and NEW are published folders (or working copies) holding one folder per task; an edition
already replaced in git is read from a checkout of it, e.g.
`git worktree add /tmp/ed2 COMMIT` and then `/tmp/ed2/reports/published`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from reports.load import add_speed, load_runs
from reports.tables import UNCOMPARED, Pairing, Table, TaskRuns, router_label
from reports.text import comparison_cells, num


@dataclass(frozen=True)
class Verdict:
    """One run's paired verdict on a task page."""

    run: str  # the run's folder name, the same in both editions ('entropy__target_share=0.2')
    row: str  # the row as the page names it ('entropy 0.2 (0.177)')
    n: int  # the run's scored examples
    pairing: Pairing


def page_verdicts(task_dir: str | Path) -> dict[str, Verdict]:
    """Every paired verdict of one task folder's page, by run folder name."""
    folder = Path(task_dir)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such task folder")
    task = TaskRuns.of(add_speed(load_runs(folder)))
    rows = task.all_runs[~task.all_runs["router"].isin(UNCOMPARED)]
    out = {}
    for _, r in rows.iterrows():
        run = Path(r["path"]).name
        setting = task.setting(r)
        label = router_label(r) + (f" {setting}" if setting != "—" else "")
        label += f" ({num(r['large_token_share'])})"
        out[run] = Verdict(run, label, int(r["n"]), task.pairing(r))
    return out


def _cells(v: Verdict) -> tuple[str, ...]:
    p = v.pairing
    diff, p_raw, p_adj, word = comparison_cells(p.comparison)
    return (f"{p.control} ({p.control_share})", f"{p.n or 0}", diff, p_raw, p_adj, word)


def changed_verdicts(old: str | Path, new: str | Path, tasks: list[str]) -> tuple[Table, int]:
    """(the rows whose verdict word differs between the editions, how many verdicts both
    editions give). Rows only one edition has are left out."""
    rows, both = [], 0
    for name in tasks:
        before, after = page_verdicts(Path(old) / name), page_verdicts(Path(new) / name)
        for run in sorted(set(before) & set(after)):
            b, a = before[run], after[run]
            both += 1
            if b.pairing.verdict != a.pairing.verdict:
                old_cells, new_cells = _cells(b), _cells(a)
                rows.append((name, a.row, *old_cells, *new_cells))
    side = ("against", "paired n", "difference [95% CI]", "p", "p (Holm)", "verdict")
    header = ("task", "row", *(f"{c}, before" for c in side), *(f"{c}, now" for c in side))
    title = "Verdicts that changed between the editions"
    note = f"{len(rows)} of the {both} verdicts both editions give changed."
    return Table(title, header, tuple(rows), note=note), both
