"""The README's headline is the published site's, not numbers typed by hand."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _table(text: str, after: str) -> list[str]:
    rest = text[text.index(after) :].splitlines()[1:]
    start = next(i for i, line in enumerate(rest) if line.startswith("|"))
    rows = []
    for line in rest[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_readme_headline_is_the_index_matrix():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = (ROOT / "reports" / "published" / "index.md").read_text(encoding="utf-8")
    got = _table(readme, "<!-- headline:")
    assert got, "README has no headline table"
    assert got == _table(index, "### Gap recovered at"), (
        "README's headline differs from reports/published/index.md: copy the regenerated matrix"
    )


def test_readme_stays_short_and_keeps_its_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 260
    assert "&& hybridbench demo" in readme and "&& python -m pytest -q" in readme
