"""`hybridbench routers`: the routers a name can select, and where each comes from.

    hybridbench routers
    small         built-in                                    routers.baselines:SmallOnly
    ...
    margin        entry point of hybridbench-margin-router 0.1.0   margin_router.router:MarginRouter

Built-ins, then the entry points of installed packages (group `hybridbench.routers`); nothing
is imported to list them. Any import path `package.module:Class` is a router name as well.
"""

from __future__ import annotations


def configure(p) -> None:
    pass


def listing(entries, kind: str) -> str:
    """One line per entry: name, where it comes from, its class path; then the import-path note."""
    rows = [(e.name, e.where(), e.target) for e in entries]
    wide = [max((len(r[i]) for r in rows), default=0) for i in (0, 1)]
    lines = [f"{n:<{wide[0]}}  {w:<{wide[1]}}  {t}" for n, w, t in rows]
    lines.append(f"(any import path package.module:Class names a {kind} too)")
    return "\n".join(lines)


def run(args) -> int:
    from routers import REGISTRY

    print(listing(REGISTRY.entries(), "router"))
    return 0
