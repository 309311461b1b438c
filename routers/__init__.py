"""Router registry: a name, resolved lazily (importing routers loads nothing), from three places:

- a built-in name (ROUTERS below);
- an entry point of an installed package, group `hybridbench.routers`
  (`[project.entry-points."hybridbench.routers"] margin = "margin_router.router:MarginRouter"`);
- an import path `package.module:Class`, anywhere a router name is taken.

    from routers import get_router
    router = get_router("entropy", {"threshold": 1.0})
    router = get_router("mypkg.routers:MyRouter", {"threshold": 0.2})

`hybridbench routers` lists every name and where it comes from. A router from outside this
repository runs behind `routers.guard.Guarded`: if it raises or answers in the wrong shape, the
command stops with one error line naming it, and a run folder resumes once it is fixed.
The router protocol is in harness/core/router.py; routers that score each drafted token and
defer on one side of a threshold derive from `routers.score.ScoreRouter` (docs/routers.md).
"""

from __future__ import annotations

import inspect

from harness.core.registry import BUILT_IN, Entry, Registry
from harness.errors import UserError

ROUTERS = {
    "small": "routers.baselines:SmallOnly",
    "large": "routers.baselines:LargeOnly",
    "random": "routers.baselines:RandomRouter",
    "entropy": "routers.baselines:EntropyRouter",
    "confidence": "routers.baselines:ConfidenceRouter",
    "oracle": "routers.baselines:OracleRouter",
    "reward": "routers.reward:RewardRouter",
    "speculative": "routers.speculative:Speculative",
    "citer": "routers.citer:Citer",
    "query": "routers.query:QueryRouter",
    "learned": "routers.learned:LearnedRouter",
    "r2r": "routers.r2r:R2RRouter",
    "random_query": "routers.query:RandomQuery",
}


REGISTRY = Registry("router", ROUTERS, "hybridbench.routers")


def router_class(name: str) -> type:
    """The class a router name (built-in, entry point or import path) names."""
    return REGISTRY.resolve(name)[0]


def router_entry(name: str) -> Entry:
    """Where router `name` comes from, resolved (`Entry.provenance()` goes into run manifests)."""
    return REGISTRY.resolve(name)[1]


def get_router(name: str, args: dict | None = None):
    """Build router `name` with keyword `args`; a wrong argument gives a UserError naming the valid
    ones. A router from outside this repository comes wrapped in `routers.guard.Guarded`."""
    cls, entry = REGISTRY.resolve(name)
    router = build(cls, name, args, plugin=entry.origin != BUILT_IN)
    if entry.origin == BUILT_IN:
        return router
    from routers.guard import Guarded  # here: it imports torch, which `import routers` must not

    return Guarded(router, name)


def build(cls: type, name: str, args: dict | None = None, factory=None, plugin: bool = False):
    """`factory(**args)` (default: the class), arguments checked against the class's
    constructor; its TypeError or ValueError, or any error of a plugin's, is one UserError."""
    args = dict(args or {})
    init = inspect.signature(cls.__init__).parameters if cls.__init__ is not object.__init__ else {}
    params = [
        n
        for n, p in init.items()
        if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in init.values())
    bad = sorted(set(args) - set(params))
    if bad and not takes_any:
        valid = ", ".join(params) or "none"
        raise UserError(f"router {name!r} has no argument {', '.join(bad)}; valid: {valid}")
    try:
        return (factory or cls)(**args)
    except UserError:
        raise
    except (TypeError, ValueError) as e:
        raise UserError(f"router {name!r}: {e}") from None
    except Exception as e:
        if not plugin:
            raise
        raise UserError(f"router {name!r} could not be built: {type(e).__name__}: {e}") from e


def parse_args(pairs: list[str]) -> dict:
    """['p=0.3', 'k=4', 'path=x.pt'] -> {'p': 0.3, 'k': 4, 'path': 'x.pt'}."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise UserError(f"router argument {pair!r} is not of the form key=value")
        key, value = pair.split("=", 1)
        out[key.strip()] = _value(value.strip())
    return out


def _value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)
