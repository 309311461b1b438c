"""The static passes of the transformers backend (`harness.backends.hf_static`) on the tiny pair in
float32: a batch whose slots feed different numbers of tokens, padded to a bucketed shape (what a
CUDA graph replays), equals the ragged eager pass within 1e-5 at B = 1, 3 and 8, rows gathered or
every slot in order; the padding leaves no trace in attention or in the cache; and whole
generations of every kind of router give the same tokens (tests/test_batching.py runs every
router batched through it against unbatched decoding)."""

from __future__ import annotations

import pytest
import torch

from harness.backends.hf import HFBackend
from harness.backends.hf_static import (
    FEED_BUCKETS,
    MAX_KEEP,
    Shape,
    feed_bucket,
    padded_rows,
    row_bucket,
)
from harness.core.loop import DecodeConfig
from harness.core.scheduler import Job, generate_many
from routers import get_router
from tests.tiny import FEED_ROUNDS as ROUNDS
from tests.tiny import info, prefixes, tiny_pair

ATOL = 1e-5


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def backend(model, step: str) -> HFBackend:
    return HFBackend(model, info("large", model), step=step)


def scratch(model, seq: list[int], rows: int):
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0, -rows:]


@pytest.mark.parametrize("b", sorted(ROUNDS))
def test_padded_bucketed_passes_equal_the_ragged_pass(pair, b):
    """Every round runs as one pass on both paths: logits of every row asked for, the hidden
    states and the summary agree within 1e-5, and so do all later rounds (the padding wrote
    nothing a later pass reads)."""
    large = pair[1]
    paths = {step: backend(large, step) for step in ("ragged", "static")}
    seqs = {step: bk.sequences(b) for step, bk in paths.items()}
    for step in paths:
        for s, p in zip(seqs[step], prefixes(b), strict=True):
            s.forward(p, 1)
    g = torch.Generator().manual_seed(b)
    shapes = set()
    for r, calls in enumerate(ROUNDS[b]):
        feeds = {s: torch.randint(3, 120, (n,), generator=g).tolist() for s, n, _ in calls}
        out = {}
        for step, bk in paths.items():
            batch = [
                (seqs[step][s], feeds[s], rows, True, ("full", "stats")[i % 2])
                for i, (s, _, rows) in enumerate(calls)
            ]
            planned = bk.static.plan(batch) if step == "static" else None
            if planned:  # (a feed past the largest bucket runs in chunks, each planned)
                shapes.add(planned[0])
            out[step] = bk.forward_batch(batch)
        for (_, _, rows), got, want in zip(calls, out["static"], out["ragged"], strict=True):
            if isinstance(want[0], torch.Tensor):
                torch.testing.assert_close(got[0], want[0], atol=ATOL, rtol=0)
                assert got[0].shape == (rows, large.config.vocab_size)
            else:
                assert torch.equal(got[0].argmax, want[0].argmax)
                torch.testing.assert_close(got[0].entropy, want[0].entropy, atol=ATOL, rtol=0)
            torch.testing.assert_close(got[1], want[1], atol=ATOL, rtol=0)
        if r == 0:  # a rejected draft: every slot forgets its last token
            for step in paths:
                for s in seqs[step]:
                    s.crop(s.length - 1)
    for s_static, s_ragged in zip(seqs["static"], seqs["ragged"], strict=True):
        assert s_static.length == s_ragged.length
    # a later one-token pass over what every round left in the caches
    probe = {step: seqs[step][b - 1].forward([11], 1)[0] for step in paths}
    torch.testing.assert_close(probe["static"], probe["ragged"], atol=ATOL, rtol=0)
    if b == 8:
        assert {s.gather for s in shapes} == {True, False}
        assert {s.rows for s in shapes if s.gather} == {2, 4}


def test_padding_is_past_each_slot_end():
    ids, pos = padded_rows([[7, 8], [], [9]], [5, 2, 0], 4)
    assert ids.tolist() == [[0, 0, 7, 8], [0, 0, 0, 0], [0, 0, 0, 9]]
    assert pos.tolist() == [[7, 8, 5, 6], [2, 3, 4, 5], [1, 2, 3, 0]]


def test_buckets():
    assert [feed_bucket(n) for n in (1, 2, 3, 5, 9, 32, 33)] == [1, 2, 4, 8, 16, 32, None]
    assert row_bucket(64, 64, 1) == (64, False)  # a one-token step covers every slot
    assert row_bucket(3, 64, 4) == (16, True)  # at least a quarter of the slots
    assert row_bucket(13, 64, 4) == (16, True)
    assert row_bucket(33, 64, 4) == (64, False)
    assert row_bucket(3, 8, 4) == (4, True) and row_bucket(1, 1, 8) == (1, False)
    assert Shape(4, 32, 256, True).keep == MAX_KEEP and Shape(4, 2, 256, True).keep == 2


def test_long_feeds_run_in_chunks_and_many_rows_ragged(pair):
    """A feed past the largest bucket (a prompt) is fed in chunks of it, each a static pass; a
    call asking for more rows than its last chunk holds runs the ragged pass."""
    bk = backend(pair[1], "static")
    long = list(range(3, 3 + FEED_BUCKETS[-1] + 8))
    assert bk.static.plan([(bk, long, 1, False)]) is None  # no one static pass holds it
    assert bk.static.plan([(bk, long[:16], MAX_KEEP + 1, False)]) is None
    assert bk.static.plan([(bk, long[:16], MAX_KEEP, False)]) is not None
    bk.sequences(1)
    passes = bk._issue([(bk, long, 2, False)])
    assert [len(sub[0][1]) for _, sub, _ in passes] == [FEED_BUCKETS[-1], 8]
    bk.reset()
    got, _ = bk.forward(long, 2)
    torch.testing.assert_close(got, scratch(pair[1], long, 2), atol=ATOL, rtol=0)
    bk.reset()
    assert len(bk._issue([(bk, long, 9, False)])) == 1  # 9 rows > the last chunk's 8: ragged


ROUTERS = [
    ("random", {"p": 0.3}),
    ("entropy", {"threshold": 3.0}),
    ("oracle", {}),
    ("speculative", {"k": 4}),
    ("speculative", {"k": 2, "adaptive": True, "schedule": "heuristic"}),
]


@pytest.mark.parametrize("name,args", ROUTERS)
def test_generations_through_static_passes_equal_the_ragged_ones(pair, name, args):
    """Greedy generations of 5 prompts on 3 slots: the same tokens and provenance either way."""
    small, large = pair
    jobs = [Job(i, p, DecodeConfig(max_new_tokens=10 + 3 * i)) for i, p in enumerate(prefixes(5))]
    results = {}
    for step in ("ragged", "static"):
        models = {
            "small": HFBackend(small, info("small", small), step=step),
            "large": HFBackend(large, info("large", large), step=step),
        }
        per_role = {r: m.sequences(3) for r, m in models.items()}
        slots = [{r: seqs[i] for r, seqs in per_role.items()} for i in range(3)]
        gens = generate_many(slots, get_router(name, args), jobs)
        results[step] = {j.key: (g.token_ids, g.provenance) for j, g in gens}
    assert results["static"] == results["ragged"]
    assert any(sum(p) for _, p in results["static"].values())  # large wrote some tokens
