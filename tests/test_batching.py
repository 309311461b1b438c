"""Batched decoding (`harness.core.scheduler.generate_many`) equals one-at-a-time decoding (`generate`),
token for token, on both CPU backends and for every kind of router: generations that finish at
different steps (budgets, EOS) and defer at different steps share batched model calls.

Tolerance: llama.cpp's batched kernels may round differently from one-sequence calls; on the
tiny F32 pair the logits of a batched call equal the one-sequence call's within 1e-4
(`test_forward_batch_rows_equal_one_sequence_calls`), and greedy tokens are asserted equal
exactly: a flip would need a top-2 margin below that, which the tiny pair does not have. The
transformers backend batches ragged rows over one preallocated cache, in float32 within 1e-5
of each call alone (tests/test_hf_batch.py); it runs here at B = 1, 3 and 8, with the ragged
pass and with its static passes (every call padded to a bucketed shape: what its CUDA graphs
replay, tests/test_hf_static.py).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from harness.backends.reward_model import RewardBackend, model_info
from harness.core.loop import DecodeConfig
from harness.core.router import Router
from harness.core.scheduler import Job, generate, generate_many
from harness.errors import UserError
from routers import get_router
from routers.citer import CiterMLP
from routers.query import QueryClassifier
from tests.test_reward import tiny_reward
from tests.tiny import BACKENDS, CPU_LIKE, GPU_LIKE, llamacpp_backend, tiny_backends, tiny_gguf_pair

B = 3
PROMPTS = [
    [1, 33, 31, 17, 30, 99, 20, 21, 97, 32, 20, 17, 2, 99, 1, 13],
    [5, 6, 7],
    [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50],
    [88, 12, 88, 12, 88],
    [20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11],
    [64, 65],
]
BUDGETS = [24, 7, 19, 30, 12, 1]  # generations end at different steps


def make_checkpoints(tmp_path) -> dict:
    """A CITER MLP and a query classifier with random weights: decisions vary by position/prompt."""
    torch.manual_seed(0)
    citer, query = CiterMLP(48), QueryClassifier(48)
    citer_path, query_path = tmp_path / "citer.pt", tmp_path / "query.pt"
    common = {"hidden_size": 48, "train_ids": ["x/0"], "calib_ids": ["x/1"]}
    torch.save(
        {"kind": "citer", "state_dict": citer.state_dict(), "threshold": 0.53, **common}, citer_path
    )
    torch.save(
        {
            "kind": "query",
            "state_dict": query.state_dict(),
            "threshold": 0.5,
            "share": 0.5,
            "calib_scores": [0.4, 0.5, 0.6],
            **common,
        },
        query_path,
    )
    return {"citer": str(citer_path), "query": str(query_path)}


ROUTERS = [
    ("small", {}),
    ("large", {}),
    ("random", {"p": 0.3}),
    ("entropy", {"threshold": 3.0}),
    ("oracle", {}),
    ("speculative", {"k": 4}),
    ("speculative", {"k": 2, "adaptive": True, "schedule": "heuristic"}),
    ("speculative", {"k": 2, "adaptive": True, "costs": CPU_LIKE}),  # stops speculating
    ("speculative", {"k": 2, "adaptive": True, "costs": GPU_LIKE}),
    ("citer", {"draft_len": 2}),
    ("reward", {}),
    ("query", {}),
    ("random_query", {"p": 0.5}),
]


# (backend, slots, how transformers runs a pass of short feeds): the batched transformers backend
# at B = 1, 3 and 8, ragged and static (every pass padded to a bucketed shape: what its CUDA
# graphs replay), and llama.cpp
SETTINGS = [("hf", b, step) for step in ("ragged", "static") for b in (1, 3, 8)]
SETTINGS += [(kind, B, None) for kind in BACKENDS if kind != "hf"]


@pytest.fixture(scope="module", params=SETTINGS, ids=lambda s: "-".join(map(str, filter(None, s))))
def setting(request):
    return request.param


@pytest.fixture(scope="module")
def kind(setting):
    return setting[0]


@pytest.fixture(scope="module")
def batched(setting):
    """n slots over one set of models (llama.cpp: one context with n sequences; transformers:
    one preallocated cache of n slots)."""
    kind, n, step = setting
    backends = tiny_backends(kind=kind, n_seq=n)
    for role in ("small", "large"):
        if step:
            backends[role].step = step
    reward = tiny_reward()
    backends["reward"] = RewardBackend(reward, model_info(reward, "tiny", "float32"))
    per_role = {role: b.sequences(n) for role, b in backends.items()}
    return [{role: seqs[i] for role, seqs in per_role.items()} for i in range(n)]


@pytest.fixture(scope="module")
def single(kind):
    """Today's unbatched models: one context per model, one sequence."""
    backends = tiny_backends(kind=kind)
    reward = tiny_reward()
    backends["reward"] = RewardBackend(reward, model_info(reward, "tiny", "float32"))
    return backends


def make_router(name, args, tmp_path):
    args = dict(args)
    if name in ("citer", "query"):
        args["path"] = make_checkpoints(tmp_path)[name]
    if name == "reward":
        return get_router("reward", {"threshold": 0.0})
    return get_router(name, args)


def jobs(cfg: DecodeConfig) -> list[Job]:
    return [
        Job(i, p, DecodeConfig(**{**cfg.__dict__, "max_new_tokens": n}))
        for i, (p, n) in enumerate(zip(PROMPTS, BUDGETS, strict=True))
    ]


def compare(batched, single, router, cfg):
    want = {j.key: generate(single, router, j.prompt_ids, j.cfg) for j in jobs(cfg)}
    got = {j.key: g for j, g in generate_many(batched, router, jobs(cfg))}
    assert sorted(got) == sorted(want)
    for key, g in got.items():
        assert not isinstance(g, Exception), g
        w = want[key]
        assert (g.token_ids, g.provenance, g.stop_reason) == (
            w.token_ids,
            w.provenance,
            w.stop_reason,
        ), key
        assert [(f.model, f.phase, f.tokens_in, f.cache_len) for f in g.forwards] == [
            (f.model, f.phase, f.tokens_in, f.cache_len) for f in w.forwards
        ]
    return want


@pytest.mark.parametrize("name,args", ROUTERS, ids=lambda x: str(x) if isinstance(x, str) else "")
def test_batched_equals_unbatched_for_every_router(batched, single, name, args, tmp_path):
    router = make_router(name, args, tmp_path)
    want = compare(batched, single, router, DecodeConfig())
    lengths = {len(g.token_ids) for g in want.values()}
    assert len(lengths) > 2  # the generations really end at different steps
    if name in ("random", "entropy", "oracle", "citer", "reward"):
        shares = {sum(g.provenance) for g in want.values() if g.token_ids}
        assert len(shares) > 1 and any(
            sum(g.provenance) for g in want.values()
        )  # defer at different steps


def test_eos_and_sampling_batched_equal_unbatched(batched, single):
    """EOS ends some generations early; sampled tokens come from each generation's own RNG."""
    first = generate(single, get_router("small"), PROMPTS[0], DecodeConfig(max_new_tokens=8))
    eos = DecodeConfig(eos_ids=(first.token_ids[5],))
    want = compare(batched, single, get_router("random", {"p": 0.3}), eos)
    assert "eos" in {g.stop_reason for g in want.values()}
    compare(
        batched, single, get_router("random", {"p": 0.3}), DecodeConfig(temperature=0.8, seed=3)
    )


def test_one_slot_is_generate_exactly(single):
    router = get_router("speculative", {"k": 3})
    for job in jobs(DecodeConfig()):
        ((_, g),) = list(generate_many([single], router, [job]))
        w = generate(single, router, job.prompt_ids, job.cfg)
        assert (g.token_ids, g.provenance, len(g.steps)) == (
            w.token_ids,
            w.provenance,
            len(w.steps),
        )


class FailsOnShortPrompts(Router):
    name = "fails"

    def decide(self, view):
        raise ValueError("boom")

    def needs(self):
        from harness.core.router import Needs

        return Needs(draft_len=1)


def test_a_failing_generation_does_not_stop_the_others(batched, single):
    class Picky(FailsOnShortPrompts):
        def decide(self, view):
            if view.n_generated == 3 and len(view.draft) == 1 and int(view.draft[0]) % 2:
                raise ValueError("boom")
            from harness.core.router import Decision

            return Decision(keep=1, defer=False)

    out = dict(generate_many(batched, Picky(), jobs(DecodeConfig())))
    failed = [k for k, g in out.items() if isinstance(g, Exception)]
    ok = [k for k, g in out.items() if not isinstance(g, Exception)]
    assert len(out) == len(PROMPTS) and ok
    small = get_router("small")
    for job in jobs(DecodeConfig()):
        if job in ok:
            assert out[job].token_ids == generate(single, small, job.prompt_ids, job.cfg).token_ids
    assert all(isinstance(out[k], ValueError) for k in failed)


def test_forward_batch_rows_equal_one_sequence_calls():
    """llama.cpp: a call batched with other sequences' calls gives the logits (and hidden states)
    of the same call made alone, within 1e-4 on the tiny F32 model."""
    path = tiny_gguf_pair()[1]
    many, one = llamacpp_backend(path, "large", n_seq=3), llamacpp_backend(path, "large")
    seqs = many.sequences(3)
    feeds = [PROMPTS[0], PROMPTS[2], PROMPTS[4]]
    got = many.forward_batch([(s, f, 2, True) for s, f in zip(seqs, feeds, strict=True)])
    nxt = many.forward_batch([(s, [7], 1, False) for s in seqs])
    for f, (logits, hidden), (step, _) in zip(feeds, got, nxt, strict=True):
        one.reset()
        want, want_h = one.forward(f, 2, True)
        torch.testing.assert_close(logits, want, atol=1e-4, rtol=0)
        torch.testing.assert_close(hidden, want_h, atol=1e-4, rtol=0)
        torch.testing.assert_close(step, one.forward([7], 1)[0], atol=1e-4, rtol=0)
    assert [s.length for s in seqs] == [len(f) + 1 for f in feeds]
    seqs[1].crop(3)  # per-sequence crop leaves the others alone
    assert [s.length for s in seqs] == [len(feeds[0]) + 1, 3, len(feeds[2]) + 1]
    with pytest.raises(UserError, match="loaded for 3 sequence"):
        many.sequences(4)


def test_batch_probe_picks_a_measured_size(tmp_path, monkeypatch):
    from harness.backends import batch_size as batching
    from harness.backends.engine import Engine
    from tests.tiny import tiny_tokenizer

    monkeypatch.setenv("HYBRIDBENCH_CACHE", str(tmp_path))
    small, large = tiny_gguf_pair()
    engine = Engine(
        tiny_tokenizer(),
        {
            "small": llamacpp_backend(small, "small", 16),
            "large": llamacpp_backend(large, "large", 16),
        },
    )
    times = batching.probe(engine, candidates=(1, 4, 16), steps=2)
    assert set(times) == {"small", "large"} and all(set(t) == {1, 4, 16} for t in times.values())
    assert all(s > 0 for t in times.values() for s in t.values())
    assert batching.best_batch({"m": {1: 1.0, 4: 2.0, 16: 10.0}}) == 4
    assert batching.best_batch({}) == 1
    b, record = batching.auto(engine, threads=1)
    assert b in batching.CANDIDATES and record["batch"] == b
    assert batching.auto(engine, threads=1) == (b, record)  # cached: no second probe
    hf = Engine(tiny_tokenizer(), tiny_backends(kind="hf"))
    assert batching.auto(hf, threads=1)[0] in batching.CANDIDATES  # transformers batches too
    with pytest.raises(UserError, match="--batch"):
        batching.parse("0")
    assert math.isfinite(sum(times["small"].values()))


def test_batch_probe_measures_the_routers_step_shape(tmp_path, monkeypatch):
    """Speculative decoding's step is k one-token small calls and one (k + 1)-token large call a
    row: `--batch auto` times that shape (cached apart from the one-token probe) and weighs each
    model's calls by their number."""
    from harness.backends import batch_size as batching
    from harness.backends.engine import Engine
    from routers.speculative import Speculative
    from tests.tiny import tiny_tokenizer

    monkeypatch.setenv("HYBRIDBENCH_CACHE", str(tmp_path))
    assert Speculative(k=3).batch_shape() == {"small": (3, 1), "large": (1, 4)}
    assert get_router("random", {"p": 0.2}).batch_shape() is None
    times = {"small": {1: 1.0, 4: 8.0}, "large": {1: 3.0, 4: 3.0}}
    assert batching.best_batch(times) == 4  # 4 / (8 + 3) > 1 / (1 + 3)
    assert batching.best_batch(times, {"small": (3, 1), "large": (1, 4)}) == 1  # 4/27 < 1/6
    small, large = tiny_gguf_pair()
    engine = Engine(tiny_tokenizer(), {"small": llamacpp_backend(small, "small", 16),
                                       "large": llamacpp_backend(large, "large", 16)})  # fmt: skip
    fed = []
    forward = type(engine.backends["large"]).forward_batch

    def spy(self, rows):
        fed.append({len(ids) for _, ids, _, _ in rows})
        return forward(self, rows)

    monkeypatch.setattr(type(engine.backends["large"]), "forward_batch", spy)
    shape = Speculative(k=3).batch_shape()
    b, record = batching.auto(engine, threads=1, shape=shape)
    assert record["shape"] == {"small": [3, 1], "large": [1, 4]} and b == record["batch"]
    assert {4} in fed and {1} in fed  # large's verify rows, small's draft rows
    assert batching.auto(engine, threads=1, shape=shape) == (b, record)  # cached
    assert "shape" not in batching.auto(engine, threads=1)[1]  # the one-token probe, apart


def test_run_batched_records_equal_unbatched_and_report_throughput(tmp_path):
    """`hybridbench run --batch 3` writes the records `--batch 1` writes (timing aside); its
    summary reports throughput, not per-stream latency; the manifest keeps each session's batch
    and the CPU other processes used meanwhile."""
    import json

    from harness.cli.main import main

    small, large = tiny_gguf_pair()
    base = ["run", "--task", "gsm8k", "--router", "random", "--router-arg", "p=0.3"]
    base += ["--limit", "5", "--max-new-tokens", "12", "--small", str(small), "--large", str(large)]
    base += ["--backend", "llama.cpp", "--threads", "1", "--n-ctx", "1024"]
    runs = {}
    for b in (1, 3):
        out = tmp_path / f"b{b}"
        assert main([*base, "--out", str(out), "--batch", str(b)]) == 0
        recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
        runs[b] = (
            {r["example_id"]: (r["completion"], r["generation"]["provenance"]) for r in recs},
            json.loads((out / "manifest.json").read_text()),
            json.loads((out / "summary.json").read_text()),
        )
    assert runs[1][0] == runs[3][0] and len(runs[1][0]) == 5
    (session,) = runs[3][1]["sessions"]
    assert session["batch"] == 3 and session["examples"] == 5 and session["wall_s"] > 0
    assert session["others_cores"] >= 0  # the CPU other processes used meanwhile (/proc/stat)
    # the CPU seconds it cost: its threads' (1 here), up to the wall time it took, and not nothing
    assert 0 < session["cpu_s"] <= session["wall_s"] * 1.5
    summary1, summary3 = runs[1][2], runs[3][2]
    assert summary3["batch"] == 3 and summary3["tok_per_s"] is None  # NaN: not per-stream
    assert summary1["batch"] == 1 and summary1["tok_per_s"] > 0
    assert summary3["throughput_tok_per_s"] > 0 and summary3["examples_per_hour"] > 0
    for k in ("quality", "large_token_share", "bytes_total", "tokens_per_example"):
        assert summary1[k] == summary3[k]


def test_training_commands_batch_to_the_same_data(tmp_path):
    """reward-data at --batch 4 writes the pairs --batch 1 writes; train-citer's and
    train-query's decoding loops give the same tokens and labels at B = 3 as at B = 1."""
    import json

    from harness.backends.engine import Engine
    from harness.cli.main import main
    from harness.training.citer import _decode
    from harness.training.query import _labels_by_decoding
    from tasks import get_task
    from tests.tiny import tiny_tokenizer

    small, large = tiny_gguf_pair()
    rows = {}
    for b in (1, 4):
        out = tmp_path / f"data-b{b}"
        argv = ["reward-data", "--out", str(out), "--tasks", "gsm8k,commonsense_qa"]
        argv += ["--prompts", "6", "--max-new-tokens", "10", "--chunks", "3", "--batch", str(b)]
        argv += ["--small", str(small), "--large", str(large), "--backend", "llama.cpp"]
        argv += ["--threads", "1", "--n-ctx", "1024"]
        assert main(argv) == 0
        lines = (out / "pairs.jsonl").read_text().splitlines()
        rows[b] = {r["id"]: r for r in map(json.loads, lines)}
    assert rows[1] == rows[4] and len(rows[1]) == 6

    def engine(n_seq):
        e = Engine(tiny_tokenizer(), tiny_backends(kind="llama.cpp", n_seq=n_seq), batch=n_seq)
        return e

    task = get_task("gsm8k")
    examples = task.split("train")[:5]
    one, three = engine(1), engine(3)
    assert _decode(one, None, task, examples, 9) == _decode(three, None, task, examples, 9)
    assert _labels_by_decoding(one, task, examples, 9) == _labels_by_decoding(
        three, task, examples, 9
    )


def test_contention_is_measured_and_a_busy_machine_is_not_cached(tmp_path, monkeypatch, capsys):
    """A timing taken while other processes use the CPU is retried, then used uncached with a
    warning; a quiet one is cached with its `others_cores` (the CPU used elsewhere meanwhile)."""
    import subprocess
    import sys
    import time

    from harness.backends import contention

    if contention._cpu_seconds_all() is None:
        pytest.skip("no /proc/stat here")
    # a real busy process beside a sleeping measurement: about one core used elsewhere
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        with contention.Contention() as c:
            time.sleep(1.0)
    finally:
        busy.kill()
    assert c.others_cores is not None and c.others_cores > 0.5
    monkeypatch.setenv("HYBRIDBENCH_BUSY_CORES", str(contention.BUSY_CORES))
    clock = iter(range(0, 10**6, 1000))  # /proc/stat as if 1,000 CPU s passed every read
    monkeypatch.setattr(contention, "_cpu_seconds_all", lambda: float(next(clock)))
    calls = []
    record = contention.measured_quietly("x", lambda: calls.append(1) or {"v": 1}, tmp_path / "a")
    assert len(calls) == contention.TRIES and record["others_cores"] > contention.BUSY_CORES
    assert not (tmp_path / "a").exists() and "not cached" in capsys.readouterr().err
    monkeypatch.setattr(contention, "_cpu_seconds_all", lambda: 5.0)  # nothing else ran
    record = contention.measured_quietly("x", lambda: {"v": 2}, tmp_path / "b")
    assert record == {"v": 2, "others_cores": 0.0}
    assert json.loads((tmp_path / "b").read_text()) == record


@pytest.mark.parametrize("name,args", ROUTERS, ids=lambda x: str(x) if isinstance(x, str) else "")
def test_overlapped_device_and_cpu_passes_equal_unbatched(name, args, tmp_path):
    """Large as a model whose passes run while the host goes on (`launches`, transformers on
    CUDA; here on the CPU, where the pass runs when issued): each round, the generations waiting
    on large have their pass issued, those waiting on small run theirs, then large's outputs are
    read. Every generation's tokens, provenance and passes are those it gets alone."""
    backends = tiny_backends(kind="hf")
    backends["large"].step = "static"
    backends["large"].launches = True
    launched = []
    inner = backends["large"].launch_batch
    backends["large"].launch_batch = lambda calls: launched.append(len(calls)) or inner(calls)
    reward = tiny_reward()
    backends["reward"] = RewardBackend(reward, model_info(reward, "tiny", "float32"))
    per_role = {role: b.sequences(B) for role, b in backends.items()}
    slots = [{role: seqs[i] for role, seqs in per_role.items()} for i in range(B)]
    single = tiny_backends(kind="hf")
    single["reward"] = RewardBackend(reward, model_info(reward, "tiny", "float32"))
    compare(slots, single, make_router(name, args, tmp_path), DecodeConfig())
    if name in ("random", "speculative", "citer", "reward", "query", "random_query"):
        assert launched  # some of large's passes were issued beside small's
