"""A router from outside this repository (an entry point or an import path) runs behind checks.

`routers.get_router` wraps such a router in `Guarded`: every call the core or a command makes
goes through, and an exception the router raises, or an answer of the wrong type or shape
(a `decide` that returns no `Decision`, a `keep` past the draft, a score per drafted token of the
wrong length), stops the command with one error line naming the router and the method:

    error: router mypkg.routers:MyRouter: decide returned None, not a Decision; ...

A run stopped that way keeps every example recorded before it, so the same command resumes
once the router is fixed. Built-in routers are not wrapped (their per-step cost stays as
measured by the benchmarks).
"""

from __future__ import annotations

import torch

from harness.core.router import Decision, Needs
from harness.errors import UserError

HINT = "fix the router and run the same command again (a run folder resumes where it stopped)"


class Guarded:
    """`router` as the core sees it, each protocol call checked; other attributes pass through."""

    def __init__(self, router, label: str):
        self.router, self.label = router, label
        self.name = getattr(router, "name", label)

    def __getattr__(self, attr):  # only for what is not defined here (thresholds, costs, ...)
        if attr.startswith("__") or attr in ("router", "label"):  # copying a half-built one
            raise AttributeError(attr)
        return getattr(self.router, attr)

    def __repr__(self) -> str:
        return f"Guarded({self.router!r})"

    def _call(self, method: str, *args):
        try:
            return getattr(self.router, method)(*args)
        except UserError:
            raise
        except Exception as e:
            raise self.error(f"{method} raised {type(e).__name__}: {e}") from e

    def error(self, what: str) -> UserError:
        """The one line a faulty router gets."""
        return UserError(f"router {self.label}: {what}; {HINT}")

    def reset(self) -> None:
        self._call("reset")

    def needs(self) -> Needs:
        needs = self._call("needs")
        if not isinstance(needs, Needs):
            raise self.error(f"needs returned {needs!r}, not a Needs")
        if not isinstance(needs.draft_len, int) or needs.draft_len < 0:
            raise self.error(f"needs asked for draft_len={needs.draft_len!r}, not an int >= 0")
        return needs

    def decide(self, view) -> Decision:
        d = self._call("decide", view)
        k = len(view.draft)
        if not isinstance(d, Decision):
            raise self.error(f"decide returned {d!r}, not a Decision")
        if not isinstance(d.keep, int) or not 0 <= d.keep <= k or (d.keep < k and not d.defer):
            raise self.error(
                f"decide returned {d} for a draft of {k} tokens (keep must be in 0..{k}, and a "
                "shorter keep must defer)"
            )
        return d

    def route_query(self, view) -> bool:
        route = self._call("route_query", view)
        if isinstance(route, torch.Tensor) and route.numel() == 1:
            route = bool(route)
        if not isinstance(route, bool):
            raise self.error(f"route_query returned {route!r}, not True or False")
        return route

    def token_scores(self, view) -> torch.Tensor:
        return checked_scores(self._call("token_scores", view), len(view.draft), self.error)

    checked_scores = token_scores  # a score router's checked scores (routers.score)

    def calibration_notes(self, engine, scores: list[float]) -> dict:
        notes = self._call("calibration_notes", engine, scores)
        if not isinstance(notes, dict):
            raise self.error(f"calibration_notes returned {type(notes).__name__}, not a dict")
        return notes

    def describe(self) -> dict:
        out = self._call("describe")
        if not isinstance(out, dict):
            raise self.error(f"describe returned {type(out).__name__}, not a dict")
        return out

    def backends(self, engine) -> dict:
        out = self._call("backends", engine)
        if not isinstance(out, dict):
            raise self.error(f"backends returned {type(out).__name__}, not a dict")
        return out

    def batch_shape(self):
        return self._call("batch_shape")

    def used_example_ids(self) -> frozenset[str]:
        return frozenset(self._call("used_example_ids"))

    def trained_on(self) -> tuple[str, ...]:
        return tuple(self._call("trained_on"))


def checked_scores(scores, k: int, error) -> torch.Tensor:
    """`scores` as a [k] float tensor, or `error(text)` raised: one score per drafted token."""
    if not isinstance(scores, torch.Tensor):
        raise error(f"token_scores returned {type(scores).__name__}, not a tensor")
    if tuple(scores.shape) != (k,):
        raise error(
            f"token_scores returned shape {tuple(scores.shape)} for a draft of {k} tokens; "
            f"expected ({k},): one score per drafted token"
        )
    return scores.float()
