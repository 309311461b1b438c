"""A check the tests of every trained score router (`r2r`, `learned`) share."""

from __future__ import annotations

from harness.backends.engine import Engine
from harness.core.loop import DecodeConfig
from harness.core.scheduler import generate
from routers import get_router
from tests.tiny import tiny_backends, tiny_tokenizer


def assert_thresholds_at_the_ends(name: str, path: str, kind: str = "hf") -> None:
    """Router `name` with checkpoint `path` at threshold -inf writes small's tokens, each from
    small; at +inf (drafting 3 a step) large's, each from large."""
    engine = Engine(tiny_tokenizer(), tiny_backends(kind=kind))
    prompt = engine.encode("count: 1 2 3")
    cfg = DecodeConfig(max_new_tokens=16)

    def run(router):
        return generate(engine.backends, router, prompt, cfg)

    keep = run(get_router(name, {"path": path, "threshold": float("-inf")}))
    assert keep.token_ids == run(get_router("small")).token_ids and set(keep.provenance) == {0}
    defer = run(get_router(name, {"path": path, "threshold": float("inf"), "draft_len": 3}))
    assert defer.token_ids == run(get_router("large")).token_ids and set(defer.provenance) == {1}
