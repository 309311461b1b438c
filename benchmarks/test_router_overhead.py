"""Per-token cost of the decoding core under each registered router, on tiny models (CPU).

    python -m pytest benchmarks -m benchmark                          # time every router
    python -m pytest benchmarks -m benchmark --benchmark-storage=benchmarks/baselines \\
        --benchmark-compare=0001 --benchmark-compare-fail=min:100%     # fail on a 2x slowdown

pytest-benchmark times one whole generation (32 tokens, greedy) per round, ROUNDS rounds. Each
benchmark also records, in `extra_info`, the tokens emitted and the per-token overhead of the core
and the router: (generation seconds - seconds inside model forward passes) / tokens, i.e. what the
harness adds on top of the models. The tiny models make forward passes cheap, so the suite
measures the harness, not the models. Saved baselines live in benchmarks/baselines/ (written
with --benchmark-save; the folder below it is pytest-benchmark's machine id).
"""

from __future__ import annotations

import pytest
import torch

from harness.backends.hf import HFBackend
from harness.core import DecodeConfig, generate
from harness.errors import UserError
from routers import ROUTERS, get_router
from tests.tiny import info, tiny_backends, tiny_model, tiny_tokenizer

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


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_router_overhead(benchmark, name, untrained):
    router = _router(name, untrained)
    models = tiny_backends()
    if router.needs().reward:
        scorer = tiny_model(7, layers=2, hidden=32)
        models["reward"] = HFBackend(scorer, info("reward", scorer))
    tok = tiny_tokenizer()
    prompt = tok("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
    cfg = DecodeConfig(max_new_tokens=TOKENS)  # no EOS: every round emits TOKENS tokens

    gen = benchmark.pedantic(
        generate, args=(models, router, prompt, cfg), rounds=ROUNDS, iterations=1, warmup_rounds=1
    )
    n = len(gen.token_ids)
    model_s = sum(f.seconds for f in gen.forwards)
    benchmark.extra_info.update(
        tokens=n,
        forwards=len(gen.forwards),
        overhead_per_token_s=(gen.seconds - model_s) / n,
        seconds_per_token=gen.seconds / n,
    )
    assert n == TOKENS
