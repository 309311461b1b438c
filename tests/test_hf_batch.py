"""The batched transformers backend (`harness.backends.hf`) on the tiny pair in float32: ragged
calls batched in one pass equal the same calls made alone within 1e-5, the static one-token step
(what a CUDA graph replays) equals the ragged pass, summaries equal the rows they summarize, and
the KV cache is allocated once and grows only by doubling."""

from __future__ import annotations

import pytest
import torch

from harness.backends.hf import HFBackend, key_bucket, supports_slots
from harness.core.loop import DecodeConfig
from harness.core.scheduler import Job, generate, generate_many
from harness.core.stats import TokenStats, token_stats
from routers import get_router
from tests.tiny import info, tiny_pair

ATOL = 1e-5


@pytest.fixture(scope="module")
def large():
    return tiny_pair()[1]


def backend(model, **kw) -> HFBackend:
    return HFBackend(model, info("large", model), **kw)


def scratch(model, seq: list[int], rows: int, hidden: bool = False):
    """Logits (and last hidden states) of the last `rows` positions of a cache-free pass."""
    with torch.no_grad():
        out = model(torch.tensor([seq]), output_hidden_states=hidden)
    return out.logits[0, -rows:], (out.hidden_states[-1][0, -rows:] if hidden else None)


# rows that differ in cache length and in new tokens: (prefix already cached, new tokens, rows)
GROUP = [
    ([1, 33, 31, 17, 30, 99, 20, 21, 97], [32, 20, 17], 2),
    ([5], [6, 7, 8, 9, 10, 11, 12], 4),
    ([40, 41, 42, 43, 44, 45], [46], 1),
    ([], [88, 12, 88, 12, 88], 5),
]


def test_ragged_batch_equals_each_call_alone(large):
    many, one = backend(large), backend(large)
    seqs = many.sequences(len(GROUP))
    for s, (prefix, _, _) in zip(seqs, GROUP, strict=True):
        if prefix:
            s.forward(prefix, 1)
    got = many.forward_batch(
        [(s, new, rows, True) for s, (_, new, rows) in zip(seqs, GROUP, strict=True)]
    )
    for (prefix, new, rows), (logits, hidden) in zip(GROUP, got, strict=True):
        one.reset()
        if prefix:
            one.forward(prefix, 1)
        want, want_h = one.forward(new, rows, hidden=True)
        torch.testing.assert_close(logits, want, atol=ATOL, rtol=0)
        torch.testing.assert_close(hidden, want_h, atol=ATOL, rtol=0)
        ref, ref_h = scratch(large, prefix + new, rows, hidden=True)
        torch.testing.assert_close(logits, ref, atol=ATOL, rtol=0)
        torch.testing.assert_close(hidden, ref_h, atol=ATOL, rtol=0)
    assert [s.length for s in seqs] == [len(p) + len(n) for p, n, _ in GROUP]
    # a crop forgets only its own slot; the next pass writes over what it forgot
    seqs[0].crop(4)
    nxt = many.forward_batch([(seqs[0], [7, 8], 1, False), (seqs[2], [9], 1, False)])
    p0, n0, _ = GROUP[0]
    torch.testing.assert_close(nxt[0][0][0], scratch(large, (p0 + n0)[:4] + [7, 8], 1)[0][0],
                               atol=ATOL, rtol=0)  # fmt: skip
    p2, n2, _ = GROUP[2]
    torch.testing.assert_close(nxt[1][0][0], scratch(large, p2 + n2 + [9], 1)[0][0],
                               atol=ATOL, rtol=0)  # fmt: skip


def test_static_one_token_step_equals_the_ragged_pass(large):
    """The one-token step a CUDA graph captures (every slot, a key-length bucket, idle slots fed
    a dummy token at their own end) gives the ragged pass's logits, on the CPU."""
    ragged, static = backend(large, step="ragged"), backend(large, step="static")
    assert static.step == "static" and backend(large).step == "ragged"  # the CPU default
    outs = {}
    for name, b in (("ragged", ragged), ("static", static)):
        seqs = b.sequences(4)
        for s, (prefix, new, _) in zip(seqs, GROUP, strict=True):
            s.forward(prefix + new, 1)
        steps = []
        for t in range(3):  # slots 1 and 3 sit idle in the first step: they must not change
            chosen = [0, 2] if t == 0 else [0, 1, 2, 3]
            calls = [(seqs[i], [10 + t + i], 1, False, "full") for i in chosen]
            steps.append([o[0] for o in b.forward_batch(calls)])
        outs[name] = steps
    for a, b in zip(outs["ragged"], outs["static"], strict=True):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, atol=ATOL, rtol=0)
    # and against a from-scratch pass: the dummy tokens of idle slots left no trace
    prefix, new, _ = GROUP[1]
    want = scratch(large, prefix + new + [12, 13], 1)[0]
    torch.testing.assert_close(outs["static"][2][1], want, atol=ATOL, rtol=0)


def test_generations_equal_with_static_and_ragged_steps(large):
    """Whole batched generations: the static step gives the ragged path's tokens."""
    small = tiny_pair()[0]
    jobs = [Job(i, p + n, DecodeConfig(max_new_tokens=9 + i)) for i, (p, n, _) in enumerate(GROUP)]
    router = get_router("random", {"p": 0.3})
    results = {}
    for step in ("ragged", "static"):
        pair = {"small": HFBackend(small, info("small", small), step=step),
                "large": HFBackend(large, info("large", large), step=step)}  # fmt: skip
        slots = [{r: b.sequences(4)[i] for r, b in pair.items()} for i in range(4)]
        results[step] = {j.key: g.token_ids for j, g in generate_many(slots, router, jobs)}
    assert results["ragged"] == results["static"]
    single = {"small": HFBackend(small, info("small", small)), "large": backend(large)}
    for job in jobs:
        assert (
            generate(single, router, job.prompt_ids, job.cfg).token_ids
            == results["static"][job.key]
        )


def test_summaries_equal_the_rows_they_summarize(large):
    b = backend(large)
    full, _ = b.forward(GROUP[0][0], 3)
    b.reset()
    stats, _ = b.forward(GROUP[0][0], 3, level="stats")
    b.reset()
    top, _ = b.forward(GROUP[0][0], 3, level="argmax")
    want = token_stats(full)
    assert isinstance(stats, TokenStats) and stats.level == "stats" and top.level == "argmax"
    assert torch.equal(stats.argmax, want.argmax) and torch.equal(top.argmax, full.argmax(-1))
    for field in ("top_prob", "entropy", "margin"):
        torch.testing.assert_close(getattr(stats, field), getattr(want, field), atol=1e-6, rtol=0)
    from routers.baselines import entropy, top_probability

    torch.testing.assert_close(want.entropy, entropy(full), atol=0, rtol=0)
    torch.testing.assert_close(want.top_prob, top_probability(full), atol=0, rtol=0)


def test_cache_is_allocated_once_and_grows_by_doubling(large):
    b = backend(large, n_ctx=16)
    seqs = b.sequences(2)
    seqs[0].forward([1, 2, 3], 1)
    buffer, capacity = b.kv.k[0].data_ptr(), b.kv.capacity
    assert capacity == 16 and b.kv.k[0].shape[0] == 2
    for t in range(8):  # decode steps within the capacity: no new allocation
        b.forward_batch([(seqs[0], [4 + t], 1, False), (seqs[1], [9], 1, False)])
    assert b.kv.k[0].data_ptr() == buffer
    seq = [1, 2, 3] + [4 + t for t in range(8)]
    seqs[0].forward(list(range(20, 30)), 1)  # past 16 positions: the capacity doubles
    assert b.kv.capacity == 32 and b.kv_nbytes() == 2 * 3 * 2 * 32 * 2 * 12 * 4
    got, _ = seqs[0].forward([5], 1)
    want = scratch(large, seq + list(range(20, 30)) + [5], 1)[0]
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    assert b.sequences(3)[2].slot == 2 and b.kv.k[0].shape[0] == 3  # more slots, contents kept
    torch.testing.assert_close(seqs[0].forward([6], 1)[0],
                               scratch(large, seq + list(range(20, 30)) + [5, 6], 1)[0],
                               atol=ATOL, rtol=0)  # fmt: skip


def test_a_subclass_with_its_own_forward_keeps_one_sequence_caches(large):
    """The reward model's backend runs its own network: no slots, one call at a time."""
    from harness.backends.reward_model import RewardBackend, model_info
    from tests.test_reward import tiny_reward

    reward = tiny_reward()
    rb = RewardBackend(reward, model_info(reward, "tiny", "float32"))
    assert not rb.slotted and supports_slots(large) and backend(large).slotted
    seqs = rb.sequences(2)
    outs = rb.forward_batch([(s, [1, 2, 3], 2, False) for s in seqs])
    assert all(o.shape == (2, 1) for o, _ in outs) and seqs[1] is not rb


def test_key_buckets():
    assert [key_bucket(n, 4096) for n in (1, 256, 257, 600, 5000)] == [256, 256, 512, 1024, 4096]
    assert key_bucket(300, 300) == 300


def test_a_failed_graph_capture_falls_back_to_the_eager_step(large, capsys):
    """Asked for CUDA graphs where none can be captured (here: no CUDA), each static pass runs
    eagerly, says so once per shape (the reason kept in `graph_failures`), and gives the same
    logits."""
    graph, ragged = backend(large, step="graph"), backend(large)
    got = [b.forward_batch([(s, [3, 4, 5], 1, False)])[0] for b, s in
           ((graph, graph), (ragged, ragged))]  # fmt: skip
    steps = [[b.forward([6 + t], 1)[0] for t in range(2)] for b in (graph, ragged)]
    torch.testing.assert_close(got[0][0], got[1][0], atol=ATOL, rtol=0)
    torch.testing.assert_close(steps[0], steps[1], atol=ATOL, rtol=0)
    # two shapes (a 3-token feed padded to 4, then one-token steps), each tried once
    assert len(graph.graph_failures) == 2 and list(graph.graphs.values()) == [None, None]
    assert all("requires CUDA" in f for f in graph.graph_failures)
    assert capsys.readouterr().err.count("CUDA graph capture failed") == 2
