"""`hybridbench routers`: the routers a name can select, and where each comes from."""

from __future__ import annotations


def configure(p) -> None:
    pass


def run(args) -> int:
    from routers import ROUTERS

    print("\n".join(sorted(ROUTERS)))
    return 0
