"""`hybridbench validity PATH...`: per run, quality with its CI, cut and no-answer shares, tokens."""

from __future__ import annotations

import json

from harness.errors import UserError
from harness.evaluation.validity import markdown, run_folders, validity


def configure(p) -> None:
    p.add_argument("paths", nargs="+", help="run folders, or folders holding run folders")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead")


def run(args) -> int:
    folders = run_folders(args.paths)
    if not folders:
        raise UserError(f"no run folders (manifest.json) under {', '.join(args.paths)}")
    rows = [validity(f) for f in folders]
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))
    return 0
