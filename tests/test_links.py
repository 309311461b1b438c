"""Every relative link in the README, docs/*.md and the published leaderboard site resolves to a
file the repository holds (tracked, or new and not ignored: what a commit would hold), so a
reader on a clone or on a code host never meets a dead link or one into an ignored folder
(runs/, results/)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "reports" / "published"
MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^\"']*[\"'])?\s*\)")
HTML_LINK = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def repository_files() -> set[str]:
    """Paths (relative to the root) a commit of the working tree would hold."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the repository's files are not known")
    return {line for line in out.splitlines() if (ROOT / line).exists()}


def documents() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    site = [SITE / "README.md", *SITE.glob("index.*"), *SITE.glob("*/report/leaderboard.*")]
    return [p for p in [*docs, *sorted(site)] if p.suffix in (".md", ".html") and p.is_file()]


def links(path: Path) -> list[str]:
    """The link targets of a Markdown or HTML file, code blocks and code spans left out."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        text = CODE.sub("", FENCE.sub("", text))
        return MD_LINK.findall(text) + HTML_LINK.findall(text)
    return HTML_LINK.findall(text)


def relative(target: str) -> str | None:
    """The file part of a relative link; None for an absolute URL, data or a fragment alone."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "//")):
        return None
    return unquote(target.split("#")[0].split("?")[0]) or None


def test_every_relative_link_resolves_to_a_repository_file():
    files = repository_files()
    folders = {str(Path(f).parent) for f in files}
    folders |= {str(p) for f in files for p in Path(f).parents}
    dead = []
    for doc in documents():
        for target in links(doc):
            path = relative(target)
            if path is None:
                continue
            resolved = (doc.parent / path).resolve()
            try:
                rel = str(resolved.relative_to(ROOT))
            except ValueError:
                dead.append(f"{doc.relative_to(ROOT)}: {target} (outside the repository)")
                continue
            if rel not in files and rel not in folders:
                dead.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not dead, "dead links:\n" + "\n".join(dead)


def test_the_site_is_checked():
    """The check reads the index and every task page of the edition, Markdown and HTML."""
    names = {str(p.relative_to(SITE)) for p in documents() if SITE in p.parents}
    assert {"index.md", "index.html"} <= names
    assert {"gsm8k/report/leaderboard.md", "gsm8k/report/leaderboard.html"} <= names
    assert any(relative(t) for t in links(SITE / "index.html"))


def test_link_parsing():
    assert relative("https://arxiv.org/abs/2409.13757") is None
    assert relative("#definitions") is None and relative("data:image/png;base64,AA") is None
    assert relative("gsm8k/report/leaderboard.md#goal") == "gsm8k/report/leaderboard.md"
    doc = "See [a](x.md), ![p](img/p.png 'cap') and `[not](code.md)`.\n```\n[no](fence.md)\n```\n"
    assert MD_LINK.findall(CODE.sub("", FENCE.sub("", doc))) == ["x.md", "img/p.png"]
