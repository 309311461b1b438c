"""Per-token cost of the decoding core under each registered router, on tiny models (CPU).

    python -m pytest benchmarks -m benchmark                          # time every router
    python -m pytest benchmarks -m benchmark --benchmark-json=now.json
    python benchmarks/check.py now.json                 # fail on a 2x slowdown against the floor

pytest-benchmark times one whole generation (32 tokens, greedy) per round, ROUNDS rounds. Each
benchmark also records, in `extra_info`, the tokens emitted and the per-token overhead of the core
and the router: (generation seconds - seconds inside model forward passes) / tokens, i.e. what the
harness adds on top of the models. The tiny models make forward passes cheap, so the suite
measures the harness, not the models.

Before each round, untimed by pytest-benchmark, the floor is timed: the same tiny pair decoding
the same number of tokens with plain transformers calls and no harness (`extra_info`'s
`floor_min_s`, the fastest). Each router's fastest round over its floor's fastest, taken
alternately, is what `benchmarks/check.py` compares with a saved baseline: a ratio measured side
by side, so a slower or busier host (CI's hosts under one CPU name ran 1.7x apart) moves both
and leaves the ratio. Saved baselines live in benchmarks/baselines/ (written with
--benchmark-save; the folder below it is pytest-benchmark's machine id).
"""

from __future__ import annotations

import time

import pytest
import torch

from harness.backends.hf import HFBackend, cache_kwarg, returned_cache
from harness.core.loop import DecodeConfig
from harness.core.scheduler import generate
from harness.errors import UserError
from routers import ROUTERS, get_router
from tests.tiny import info, tiny_backends, tiny_model, tiny_pair, tiny_tokenizer

pytestmark = pytest.mark.benchmark

TOKENS = 32
# 30 rounds span ~1-3 s per router: on the shared 2-core VMs CI runs on, slow spells of a second
# or more doubled a 5-round minimum (4 of 11 routers "regressed" 2x in one CI run, none when rerun)
ROUNDS = 30
# arguments that make each router runnable here (defaults where none are needed)
ARGS = {"random": {"p": 0.5}, "reward": {"threshold": 0.0}, "speculative": {"k": 4}}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """Untrained checkpoints for the routers that load one (timing only: their decisions are
    whatever random weights give). Returns router name -> extra arguments."""
    out, hidden = tmp_path_factory.mktemp("ckpt"), 48  # tests.tiny's hidden size
    ckpts = {}
    try:
        from routers.citer import CiterMLP
        from routers.query import QueryClassifier

        # seeded: an untrained MLP's share of large tokens sets the router's cost, and unseeded
        # draws moved citer's time over the floor 0.64-1.34x of the baseline's between runs
        torch.manual_seed(0)
        ids = {"train_ids": [], "calib_ids": []}
        ckpts["citer"] = {"kind": "citer", "hidden_size": hidden, "threshold": 0.5, **ids}
        ckpts["citer"]["state_dict"] = CiterMLP(hidden).state_dict()
        ckpts["query"] = {"kind": "query", "hidden_size": hidden, "threshold": 0.5, **ids}
        ckpts["query"].update(share=0.5, calib_scores=[0.5])
        ckpts["query"]["state_dict"] = QueryClassifier(hidden).state_dict()
    except ImportError:
        return {}
    for name, ckpt in ckpts.items():
        torch.save(ckpt, out / f"{name}.pt")
    return {name: {"path": str(out / f"{name}.pt")} for name in ckpts}


def _router(name: str, extra: dict):
    try:
        return get_router(name, {**ARGS.get(name, {}), **extra.get(name, {})})
    except (UserError, TypeError, ValueError, KeyError, RuntimeError, OSError) as e:
        pytest.skip(f"router {name} cannot be built here: {e}")


def _prompt() -> list[int]:
    tok = tiny_tokenizer()
    return tok("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")["input_ids"]


def _plain_decode(models, prompt: list[int], n: int) -> None:
    """n greedy steps of each (model, its cache keyword `cache_kwarg`) with its KV cache:
    transformers alone, no harness."""
    with torch.inference_mode():
        for model, name in models:
            ids, past = torch.tensor([prompt]), None
            for _ in range(n):
                out = model(input_ids=ids, use_cache=True, **{name: past})
                past, ids = returned_cache(out), out.logits[:, -1:].argmax(-1)


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_router_overhead(benchmark, name, untrained):
    router = _router(name, untrained)
    models = tiny_backends()
    if router.needs().reward:
        scorer = tiny_model(7, layers=2, hidden=32)
        models["reward"] = HFBackend(scorer, info("reward", scorer))
    prompt = _prompt()
    cfg = DecodeConfig(max_new_tokens=TOKENS)  # no EOS: every round emits TOKENS tokens
    pair, floor = [(m, cache_kwarg(m)) for m in tiny_pair()], []

    def floor_then_args():
        """Untimed by pytest-benchmark: the floor, timed here right before each round."""
        start = time.perf_counter()
        _plain_decode(pair, prompt, TOKENS)
        floor.append(time.perf_counter() - start)
        return (models, router, prompt, cfg), {}

    gen = benchmark.pedantic(
        generate, setup=floor_then_args, rounds=ROUNDS, iterations=1, warmup_rounds=1
    )
    n = len(gen.token_ids)
    model_s = sum(f.seconds for f in gen.forwards)
    benchmark.extra_info.update(
        floor_min_s=min(floor),
        tokens=n,
        forwards=len(gen.forwards),
        overhead_per_token_s=(gen.seconds - model_s) / n,
        seconds_per_token=gen.seconds / n,
    )
    assert n == TOKENS
