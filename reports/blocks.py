"""Generated lines inside a hand-written markdown file: the lines between a start marker line
(`<!-- headline ...`, `<!-- rows: mbpp -->`) and the end marker line after it, which a command
writes and a test compares (the README's headline matrix, docs/edition.md's row tables)."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserError


def span(lines: list[str], start: str, end: str, where: str) -> tuple[int, int]:
    """The indices of the first line starting with `start` and of the first line after it that
    is `end`; a UserError naming `where` when there is no such pair."""
    first = next((i for i, x in enumerate(lines) if x.strip().startswith(start)), None)
    last = (
        None
        if first is None
        else next((i for i in range(first + 1, len(lines)) if lines[i].strip() == end), None)
    )
    if first is None or last is None:
        raise UserError(f"{where} ({start} ... {end} lines)")
    return first, last


def read(text: str, start: str, end: str, where: str) -> list[str]:
    """The lines of `text` between its `start` and `end` lines."""
    lines = text.splitlines()
    first, last = span(lines, start, end, where)
    return lines[first + 1 : last]


def put(path: str | Path, start: str, end: str, body: list[str], where: str) -> bool:
    """Write `body` between `path`'s `start` and `end` lines, every other line kept as it is;
    return whether that changed the file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    first, last = span(lines, start, end, where)
    new = "".join(lines[: first + 1]) + "".join(f"{x}\n" for x in body) + "".join(lines[last:])
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True
