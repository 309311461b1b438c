"""Router registry: names -> "module:Class", resolved lazily so importing routers loads nothing."""

from __future__ import annotations

import importlib
import inspect

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
    "random_query": "routers.query:RandomQuery",
}


def router_class(name: str):
    if name not in ROUTERS:
        raise UserError(f"unknown router {name!r}; valid routers: {', '.join(sorted(ROUTERS))}")
    module, cls = ROUTERS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def get_router(name: str, args: dict | None = None):
    """Build router `name` with keyword `args`; a wrong argument gives a UserError naming the valid ones."""
    cls = router_class(name)
    args = dict(args or {})
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    bad = sorted(set(args) - set(params))
    if bad:
        valid = ", ".join(params) or "none"
        raise UserError(f"router {name!r} has no argument {', '.join(bad)}; valid: {valid}")
    try:
        return cls(**args)
    except (TypeError, ValueError) as e:
        raise UserError(f"router {name!r}: {e}") from None


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
