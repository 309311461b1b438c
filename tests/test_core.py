"""The decoding core on tiny random models, on each CPU backend (transformers, llama.cpp):
equivalences with the backend library's own greedy generation, caches, seeds, stops."""

from __future__ import annotations

import math

import pytest
import torch

from harness.backends.hf import HFBackend
from harness.core.loop import DecodeConfig, GenerationState, catch_up, rollback
from harness.core.router import Decision, Router, StepView
from harness.core.scheduler import generate, run_calls
from routers import get_router
from tests.tiny import BACKENDS, greedy_reference, scratch_logits, tiny_backends

PROMPT = [1, 33, 31, 17, 30, 99, 20, 21, 97, 32, 20, 17, 2, 99, 1, 13]
N = 24


@pytest.fixture(scope="module", params=BACKENDS)
def pair(request):
    return tiny_backends(kind=request.param)


def hf_greedy(backend, n=N, **hf_kwargs):
    """Reference: the backend library's own greedy generation of exactly n tokens (EOS ignored)."""
    return greedy_reference(backend, PROMPT, n, **hf_kwargs)


def run(pair, name, args=None, **cfg):
    cfg = DecodeConfig(**{"max_new_tokens": N, **cfg})
    return generate(pair, get_router(name, args), PROMPT, cfg)


KEEP_ALL = [
    ("small", {}),
    ("random", {"p": 0.0}),
    ("entropy", {"threshold": math.inf}),
    ("confidence", {"threshold": 0.0}),
]
DEFER_ALL = [
    ("large", {}),
    ("random", {"p": 1.0}),
    ("entropy", {"threshold": -1.0}),
    ("confidence", {"threshold": 1.1}),
]


@pytest.mark.parametrize("name,args", KEEP_ALL)
def test_keep_everything_equals_small_greedy(pair, name, args):
    g = run(pair, name, args)
    assert list(g.token_ids) == hf_greedy(pair["small"])
    assert set(g.provenance) == {0}
    assert not any(s.large_called for s in g.steps)


@pytest.mark.parametrize("name,args", DEFER_ALL)
def test_defer_everything_equals_large_greedy(pair, name, args):
    g = run(pair, name, args)
    assert list(g.token_ids) == hf_greedy(pair["large"])
    assert set(g.provenance) == {1}


def test_oracle_equals_large_greedy_with_fewer_large_tokens(pair):
    g = run(pair, "oracle")
    assert list(g.token_ids) == hf_greedy(pair["large"])
    share = sum(g.provenance) / len(g.provenance)
    assert hf_greedy(pair["small"]) != hf_greedy(pair["large"])  # the models do differ
    assert 0 < share < 1
    assert all(s.large_called for s in g.steps)


def test_large_only_never_runs_small(pair):
    g = run(pair, "large")
    assert {f.model for f in g.forwards} == {"large"}


def test_catch_up_matches_from_scratch_forward(pair):
    """After the large model catches up on k unseen tokens in one pass, its next-token logits equal
    a from-scratch forward over the same prefix (float32; tolerance 1e-4 absolute on
    transformers, 1e-3 on llama.cpp, whose KV cache is f16: tests/test_llamacpp.py)."""
    large = pair["large"]
    atol = 1e-4 if isinstance(large, HFBackend) else 1e-3
    large.reset()
    r = GenerationState(pair, list(PROMPT), len(PROMPT), clock=lambda: 0.0)
    run_calls(catch_up(r, "large", PROMPT[:5], 1))
    seq = PROMPT + [40, 41, 42, 43]
    got, _ = run_calls(catch_up(r, "large", seq, 1))
    assert r.forwards[-1].tokens_in == len(seq) - 5  # one batched pass over every unseen token
    torch.testing.assert_close(got[0], scratch_logits(large, seq), atol=atol, rtol=0)
    # roll back past the caught-up tokens and take another branch: still exact
    rollback(r, len(PROMPT) + 1)
    seq2 = PROMPT + [40, 50, 51]
    got2, _ = run_calls(catch_up(r, "large", seq2, 1))
    torch.testing.assert_close(got2[0], scratch_logits(large, seq2), atol=atol, rtol=0)


def test_random_router_share_tracks_p(pair):
    shares = []
    for seed in range(4):
        g = run(pair, "random", {"p": 0.3}, seed=seed, max_new_tokens=40)
        shares.append(sum(g.provenance) / len(g.provenance))
    assert 0.1 < sum(shares) / len(shares) < 0.5


def test_same_seed_same_sample_different_seed_different(pair):
    a = run(pair, "random", {"p": 0.5}, temperature=1.0, seed=7)
    b = run(pair, "random", {"p": 0.5}, temperature=1.0, seed=7)
    c = run(pair, "random", {"p": 0.5}, temperature=1.0, seed=8)
    assert a.token_ids == b.token_ids and a.provenance == b.provenance
    assert a.token_ids != c.token_ids


def test_top_p_tiny_keeps_only_argmax(pair):
    g = run(pair, "small", temperature=1.0, top_p=1e-9, seed=3)
    assert list(g.token_ids) == hf_greedy(pair["small"])


def test_eos_stops_and_is_not_emitted(pair):
    greedy = hf_greedy(pair["small"])
    eos = greedy[5]
    g = run(pair, "small", eos_ids=(eos,))
    assert list(g.token_ids) == greedy[: greedy.index(eos)]
    assert g.stop_reason == "eos" and len(g.provenance) == len(g.token_ids)


def test_stop_string_cuts_text(pair):
    decode = lambda ids: "".join(chr(65 + i % 26) for i in ids)  # noqa: E731
    full = decode(hf_greedy(pair["small"]))
    stop = full[6:8]
    g = generate(
        pair, get_router("small"), PROMPT, DecodeConfig(max_new_tokens=N, stop=(stop,)), decode
    )
    assert g.stop_reason == "stop_string" and g.text == full[: full.find(stop)]


def test_max_tokens_respected_with_multi_token_drafts(pair):
    class Keep3(Router):
        def needs(self):
            from harness.core.router import Needs

            return Needs(draft_len=3)

        def decide(self, view: StepView) -> Decision:
            return Decision(keep=len(view.draft), defer=True)

    for n in (1, 4, 7):
        g = generate(pair, Keep3(), PROMPT, DecodeConfig(max_new_tokens=n))
        assert len(g.token_ids) == n == len(g.provenance)


def test_invalid_decision_is_an_error(pair):
    class Bad(Router):
        def decide(self, view):
            return Decision(keep=0, defer=False)

    with pytest.raises(RuntimeError, match="invalid"):
        generate(pair, Bad(), PROMPT, DecodeConfig(max_new_tokens=3))


def test_records_are_consistent(pair):
    g = run(pair, "random", {"p": 0.5}, seed=1)
    assert sum(s.kept + s.large_tokens for s in g.steps) == len(g.token_ids)
    assert sum(s.large_tokens for s in g.steps) == sum(g.provenance)
    assert g.forwards[0].phase == "prefill" and g.forwards[0].cache_len == 0
    assert 0 <= g.ttft <= g.seconds


@pytest.mark.parametrize(
    "name,args,small,large",
    [
        ("small", {}, {"argmax"}, set()),
        ("large", {}, set(), {"argmax"}),
        ("random", {"p": 0.5}, {"argmax"}, {"argmax"}),
        ("entropy", {"threshold": 4.8405}, {"stats"}, {"argmax"}),  # small's are 4.838-4.842
        ("confidence", {"threshold": 0.05}, {"stats"}, {"argmax"}),
        ("oracle", {}, {"full"}, {"full"}),
        ("speculative", {"k": 3}, {"full"}, {"full"}),
    ],
)
def test_calls_ask_only_for_what_is_read(pair, monkeypatch, name, args, small, large):
    """Greedy decoding asks small for the argmax only unless the router reads more of q
    (`Needs.small_logits`), and large for its argmax unless the router reads p (a verify);
    at temperature > 0 every call asks for full rows (sampling reads them)."""
    import harness.core.scheduler as scheduler

    asked, forward = [], scheduler._forward
    monkeypatch.setattr(
        scheduler, "_forward", lambda c: asked.append((c.backend.info.name, c.level)) or forward(c)
    )
    g = run(pair, name, args)
    assert {lvl for role, lvl in asked if role == "small"} == small
    assert {lvl for role, lvl in asked if role == "large"} == large
    if name == "entropy":  # the router still defers on its summary: some tokens, not all
        assert 0 < sum(g.provenance) < len(g.provenance)
    asked.clear()
    run(pair, name, args, temperature=0.7, seed=1)
    assert {lvl for _, lvl in asked} == {"full"}


def test_summaries_give_the_tokens_and_decisions_of_full_rows(pair):
    """A router that reads the summary decides as it would on full rows: `entropy` with
    small_logits "stats" against the same router made to read full rows."""
    from routers.baselines import EntropyRouter

    class FullEntropy(EntropyRouter):
        small_logits = "full"

    shares, cfg = set(), DecodeConfig(max_new_tokens=N)
    for threshold in (4.84, 4.84105, 4.84125):  # among small's entropies on this prompt
        a = generate(pair, EntropyRouter(threshold=threshold), PROMPT, cfg)
        b = generate(pair, FullEntropy(threshold=threshold), PROMPT, cfg)
        assert (a.token_ids, a.provenance) == (b.token_ids, b.provenance)
        shares.add(sum(a.provenance))
    assert len(shares) > 1  # the thresholds do decide differently


def test_small_logits_speaks_the_levels_of_stats():
    """`Needs.small_logits` takes the levels a model call returns (`full`, `stats`, `argmax`),
    the one vocabulary of harness/core/stats.py; another word is refused, naming the levels."""
    from harness.core.router import Needs
    from harness.core.stats import LEVELS

    for level in LEVELS:
        assert Needs(small_logits=level).small_logits == level
    with pytest.raises(ValueError, match='"none" is spelled "argmax"'):
        Needs(small_logits="none")
    with pytest.raises(ValueError, match="must be one of"):
        Needs(small_logits="rows")
