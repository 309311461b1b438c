"""A page written twice, as Markdown (for reading on a code host) and as static HTML (for a
browser, a phone included): headings, paragraphs, tables, figures and collapsed sections.

    page = Page("hybridbench leaderboard: gsm8k")
    page.paragraph("Small-only scores **0.275** ...", anchor="headline")
    page.table(goal)
    with page.details("Runs"):
        page.table(runs)
    page.write(out_dir, "leaderboard")        # -> leaderboard.md, leaderboard.html

The HTML has no script and no external asset (plots are embedded as data URIs); it carries a
viewport tag, and every table scrolls sideways inside its own box, so the page itself never
does on a narrow screen.
"""

from __future__ import annotations

import base64
import html
import re
from contextlib import contextmanager
from pathlib import Path

from reports.style import style
from reports.tables import EMPTY, Table
from reports.text import HEADER_LINKS

CSS = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;"
    "padding:0.5em 1em 2em;max-width:1300px;line-height:1.45;color:#1a1a1a}"
    "p,li,figcaption,summary{overflow-wrap:anywhere}"
    "nav{font-size:15px;padding:0.4em 0;border-bottom:1px solid #ddd}"
    "nav a,nav strong{margin-right:0.9em;white-space:nowrap;display:inline-block}"
    "h1{font-size:1.6em;margin:0.5em 0 0.3em}h2{font-size:1.3em;margin:1.4em 0 0.4em}"
    "h3{font-size:1.1em;margin:1.2em 0 0.3em}"
    ".scroll{overflow-x:auto;max-width:100%}"
    "table{border-collapse:collapse;margin:0.4em 0;font-size:14px}"
    "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}"
    "th{background:#f0f0f0}tr:nth-child(even){background:#fafafa}td.num{white-space:nowrap}"
    "th a{color:inherit}.mark{font-size:0.95em;margin-right:0.3em}"
    "p.note{font-size:13px;color:#444;margin:0.2em 0 1em}"
    "img{max-width:100%;height:auto;display:block;margin:0.5em 0}"
    "figure{margin:1em 0}figcaption{font-size:14px;color:#333}"
    "details{margin:0.8em 0;border-top:1px solid #eee;padding-top:0.3em}"
    "summary{cursor:pointer;font-weight:600;font-size:1.1em;padding:0.3em 0}"
    "#headline{font-size:1.05em}"
    "@media (max-width:600px){body{padding:0.3em 0.6em 2em}table{font-size:12px}"
    "th,td{padding:3px 5px}h1{font-size:1.3em}}"
)
NUM_CELL_MAX = 32  # characters: '+0.260 [+0.195, +0.330]' is 23
BOLD = re.compile(r"\*\*(.+?)\*\*")
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def _link(m: re.Match) -> str:
    """A Markdown link as HTML; a link to a page's .md goes to its .html twin."""
    target = re.sub(r"\.md(#|$)", r".html\1", m.group(2))
    return f'<a href="{target}">{m.group(1)}</a>'


def _inline(text: str) -> str:
    """Escaped HTML of `text`, with **bold** and [links](target) kept."""
    return LINK.sub(_link, BOLD.sub(r"<strong>\1</strong>", html.escape(text)))


def md_table(t: Table) -> str:
    """The table in Markdown ('|' in a cell escaped); a line saying so when it has no rows."""
    if not t.rows:  # a header with nothing under it reads as a rendering fault
        return f"_{EMPTY}_"

    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines)


def _mark(cell: str) -> str:
    """A router's cell with its glyph in its colour (reports.style) before the name."""
    s = style(cell.split(" ")[0])
    return f'<span class="mark" style="color:{s.color}">{s.symbol}</span>{html.escape(cell)}'


def html_table(t: Table) -> str:
    """The table in HTML, in a box that scrolls sideways; headers link to their definitions."""
    if not t.rows:
        return f"<p><em>{html.escape(EMPTY)}</em></p>"

    def head(h: str) -> str:
        link = HEADER_LINKS.get(h)
        text = html.escape(h)
        return f'<th><a href="#{link}">{text}</a></th>' if link else f"<th>{text}</th>"

    def cell(c: str, first: bool) -> str:
        if first and t.marks:
            return f"<td>{_mark(c)}</td>"
        # a short cell (a number with its interval, a setting) stays on one line, so that a
        # row keeps one line where the table scrolls sideways; longer text wraps (a list of
        # commits, a machine's description: kept on one line they widened the page)
        short = len(c) <= NUM_CELL_MAX and not t.wrap
        attr = ' class="num"' if short else ""
        return f"<td{attr}>{html.escape(c)}</td>"

    body = "\n".join(
        "<tr>" + "".join(cell(c, i == 0) for i, c in enumerate(row)) + "</tr>" for row in t.rows
    )
    heads = "".join(head(h) for h in t.header)
    return (
        f'<div class="scroll"><table>\n<thead><tr>{heads}</tr></thead>\n<tbody>\n{body}\n'
        "</tbody>\n</table></div>"
    )


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) of a PNG from its header."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


class Page:
    """Markdown lines and HTML body of one page, written side by side."""

    def __init__(self, title: str):
        self.title = title
        self.md: list[str] = []
        self.body: list[str] = []

    def nav(self, links: list[tuple[str, str | None, str | None]]) -> None:
        """A line of links: (text, Markdown target, HTML target); no target: the current page."""
        md = [f"**{t}**" if m is None else f"[{t}]({m})" for t, m, _ in links]
        self.md += [" · ".join(md), ""]
        items = [
            f"<strong>{html.escape(t)}</strong>"
            if h is None
            else f'<a href="{html.escape(h)}">{html.escape(t)}</a>'
            for t, _, h in links
        ]
        self.body.append(f"<nav>{''.join(items)}</nav>")

    def heading(self, text: str, level: int, anchor: str = "", md_level: int = 0) -> None:
        """A heading; `md_level`: its Markdown level where it differs (sections of tables are
        all '###' there, the titles that tools splitting a page by table look for)."""
        self.md += [f"{'#' * (md_level or level)} {text}", ""]
        ident = f' id="{anchor}"' if anchor else ""
        self.body.append(f"<h{level}{ident}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str, anchor: str = "", note: bool = False) -> None:
        """A paragraph (**bold** kept); `note`: small print under a table or figure."""
        if not text:
            return
        self.md += [f"_{text}_" if note else text, ""]
        attrs = (f' id="{anchor}"' if anchor else "") + (' class="note"' if note else "")
        self.body.append(f"<p{attrs}>{_inline(text)}</p>")

    def bullets(self, items: list[str]) -> None:
        self.md += [*(f"- {x}" for x in items), ""]
        self.body.append("<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in items) + "</ul>")

    def table(self, t: Table, level: int = 3, anchor: str = "") -> None:
        """The table under its title ('###' in Markdown), its note (order, shared arguments)
        below it."""
        self.heading(t.title, level, anchor, md_level=3)
        self.md += [md_table(t), ""]
        self.body.append(html_table(t))
        if t.rows:  # an order or shared arguments of nothing would read as a fault
            self.paragraph(t.note, note=True)

    def figure(self, name: str, caption: str, png: bytes, file: str) -> None:
        """A plot: linked as `file` from the Markdown, embedded in the HTML."""
        self.md += [f"*{caption}*", "", f"![{name}]({file})", ""]
        data = base64.b64encode(png).decode("ascii")
        w, h = png_size(png)
        self.body.append(
            f"<figure><figcaption>{html.escape(caption)}</figcaption>"
            f'<img alt="{html.escape(name)}" width="{w}" height="{h}" '
            f'src="data:image/png;base64,{data}"></figure>'
        )

    @contextmanager
    def details(self, summary: str, anchor: str = ""):
        """A collapsed section: what is added inside shows when its summary is opened."""
        ident = f' id="{anchor}"' if anchor else ""
        self.md += [f'<a id="{anchor}"></a>', ""] if anchor else []
        self.md += ["<details>", f"<summary>{html.escape(summary)}</summary>", ""]
        self.body.append(f"<details{ident}><summary>{html.escape(summary)}</summary>")
        yield
        self.md += ["</details>", ""]
        self.body.append("</details>")

    def definitions(self, defs: list[tuple[str, str, str]]) -> None:
        """The definitions, each with its anchor (the HTML tables' headers link to them)."""
        self.heading("Definitions", 2, "definitions")
        self.md += [*(f'- <a id="{a}"></a>**{term}**: {text}' for a, term, text in defs), ""]
        items = "".join(
            f'<li id="{a}"><strong>{html.escape(term)}</strong>: {html.escape(text)}</li>'
            for a, term, text in defs
        )
        self.body.append(f"<ul>{items}</ul>")

    def write(self, out: Path, stem: str) -> Path:
        """Write `stem`.md and `stem`.html into `out`; return the HTML's path."""
        out.mkdir(parents=True, exist_ok=True)
        md = [f"# {self.title}", "", *self.md]
        while md and md[-1] == "":
            md.pop()
        (out / f"{stem}.md").write_text("\n".join(md) + "\n", encoding="utf-8", newline="\n")
        page = (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(self.title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        )
        nav = [x for x in self.body[:1] if x.startswith("<nav>")]
        rest = self.body[len(nav) :]
        page += "\n".join([*nav, f"<h1>{html.escape(self.title)}</h1>", *rest])
        path = out / f"{stem}.html"
        path.write_text(page + "\n</body>\n</html>\n", encoding="utf-8", newline="\n")
        return path
