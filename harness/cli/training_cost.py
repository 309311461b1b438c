"""`hybridbench training-cost FOLDER`: what each trained router cost (wall and CPU hours, tokens)."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserError
from harness.training.cost import markdown


def configure(p) -> None:
    p.add_argument("root", type=Path, help="a folder holding training outputs (and runs)")


def run(args) -> int:
    if not args.root.is_dir():
        raise UserError(f"not a folder: {args.root}")
    print(markdown(args.root))
    return 0
