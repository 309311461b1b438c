"""A task's rows on its whole test split, as the edition page (docs/edition.md) lists them:

    python -m reports.edition_rows reports/published/mbpp          # the markdown table
    python -m reports.edition_rows reports/published/mbpp --check docs/edition.md

Every run of the task folder that scored as many examples as large-only (the whole split, in an
edition whose other rows keep fewer), with its quality and 95% interval, its large-token share
and the wall and CPU hours of all its invocations (the task page's Cost table,
`reports.provenance`; '≤' an upper bound where an invocation recorded no CPU time). In
docs/edition.md the table sits between the lines `<!-- rows: TASK -->` and `<!-- /rows -->`;
`--check FILE` exits 1 when FILE's table differs from the folder's, `--write FILE` puts it there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import UserError
from reports import blocks
from reports.load import decoded, load_runs
from reports.provenance import hours, run_cpu_hours
from reports.text import is_modeled, num, quality_cell

FIRST = ("small", "large", "oracle", "random")  # the rows the others are read against
HEADER = ("row", "quality [95% CI]", "large-token share", "wall hours", "CPU hours")


def whole_split_rows(task_folder: str | Path) -> list[str]:
    """The markdown table (its lines) of the task folder's runs on as many examples as
    large-only: the references and controls first (FIRST), then the routers by name, each
    router's runs by the share they realized."""
    df = load_runs(task_folder)
    large = df[(df["router"] == "large") & df["n"].map(decoded)]
    if len(large) != 1:
        raise UserError(f"{task_folder}: needs one large-only run to tell the whole split")
    n = int(large["n"].iloc[0])
    rows = df[df["n"].map(decoded)]
    rows = rows[rows["n"].astype(int) == n]
    first = {name: i for i, name in enumerate(FIRST)}
    rows = rows.assign(_first=rows["router"].map(lambda r: first.get(r, len(first))))
    rows = rows.sort_values(["_first", "router", "large_token_share", "run"])
    metric = str(large["metric"].iloc[0])
    out = [
        "| " + " | ".join(("row", f"{metric} [95% CI]", *HEADER[2:])) + " |",
        "|" + "---|" * len(HEADER),
    ]
    for _, r in rows.iterrows():
        wall = hours(r["session_wall_s"]) + (" (answers reused)" if is_modeled(r) else "")
        share = num(r["large_token_share"])
        out.append(f"| {r['run']} | {quality_cell(r)} | {share} | {wall} | {run_cpu_hours(r)} |")
    return out


def _marks(task: str) -> tuple[str, str]:
    return f"<!-- rows: {task} -->", "<!-- /rows -->"


def written(text: str, task: str) -> list[str]:
    """The table lines `text` holds in its block for `task`."""
    return blocks.read(text, *_marks(task), f"no rows block for {task}")


def write(path: Path, task: str, table: list[str]) -> bool:
    """Put `table` into `path`'s block for `task`; return whether the file changed."""
    return blocks.put(path, *_marks(task), table, f"{path} has no rows block for {task}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m reports.edition_rows", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "task_folder", type=Path, help="a published task folder (reports/published/mbpp)"
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--check", type=Path, metavar="FILE", help="exit 1 when FILE's table differs"
    )
    group.add_argument("--write", type=Path, metavar="FILE", help="put the table into FILE's block")
    args = p.parse_args(argv)
    try:
        table = whole_split_rows(args.task_folder)
        task = args.task_folder.name
        if args.check:
            same = written(args.check.read_text(encoding="utf-8"), task) == table
            print(
                f"{args.check}: {task}'s rows {'match' if same else 'differ from'} {args.task_folder}"
            )
            return 0 if same else 1
        if args.write:
            changed = write(args.write, task, table)
            print(f"{args.write}: {task}'s rows {'written' if changed else 'already there'}")
            return 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
