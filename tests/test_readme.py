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


def test_publish_writes_the_site_matrix_into_a_readme_headline(tmp_path):
    """`publish --readme FILE` (reports.publish.write_headline) replaces FILE's headline block
    by the matrix of the site's index.md and leaves every other line alone; the committed README
    is already the published matrix, and a README without the block is refused."""
    import pytest

    from harness.errors import UserError
    from reports.publish import write_headline

    dest = tmp_path / "published"
    dest.mkdir()
    (dest / "index.md").write_text(
        "# Site\n\n### Gap recovered at <= 25% large tokens\n\n| router | gsm8k |\n|---|---|\n"
        "| entropy | 80.0% |\n\nAfter the matrix.\n"
    )
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Tool\n\nIntro.\n\n<!-- headline: the matrix -->\n| router | gsm8k |\n|---|---|\n"
        "| entropy | 70.0% |\n| old row | 1% |\n<!-- /headline -->\n\nMore prose.\n"
    )
    assert write_headline(readme, dest) is True
    assert readme.read_text() == (
        "# Tool\n\nIntro.\n\n<!-- headline: the matrix -->\n| router | gsm8k |\n|---|---|\n"
        "| entropy | 80.0% |\n<!-- /headline -->\n\nMore prose.\n"
    )
    assert write_headline(readme, dest) is False  # the same matrix again: nothing to write
    copy = tmp_path / "README-copy.md"
    copy.write_text((ROOT / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    assert write_headline(copy, ROOT / "reports" / "published") is False
    readme.write_text("# Tool\n\nNo headline here.\n")
    with pytest.raises(UserError, match="no headline block"):
        write_headline(readme, dest)
