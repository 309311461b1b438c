"""The references `hybridbench bench-gpu` (`harness.evaluation.gpu_bench`) measures the core
against: transformers' own `generate` of the large model (eager, and with a static cache, which
transformers compiles on CUDA), and how far a batched pass's logits move from the same calls
made alone in the model's dtype."""

from __future__ import annotations

import time

import torch

from harness.backends.hf import HFBackend
from harness.evaluation.gpu_tables import progress


def prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, vocab, (n, length), generator=g).tolist()


def batch_numerics(backend: HFBackend, n: int = 8, seed: int = 0) -> dict:
    """How far a batched call's logits move from the same call made alone: n ragged calls
    (cache lengths and new tokens differ by row) batched in one pass against each alone, on
    `backend`'s model and dtype. Returns the largest |difference| over the vocabulary, and how
    many of the n * rows greedy tokens differ (a flip needs a top-2 margin below the move)."""
    g = torch.Generator().manual_seed(seed)
    vocab = backend.n_vocab
    group = [
        (
            torch.randint(10, vocab, (int(torch.randint(1, 40, (1,), generator=g)),), generator=g),
            torch.randint(10, vocab, (1 + i % 5,), generator=g).tolist(),
        )
        for i in range(n)
    ]
    seqs = backend.sequences(n)
    for s, (prefix, _) in zip(seqs, group, strict=True):
        s.reset()
        s.forward(prefix.tolist(), 1)
    calls = [(s, new, len(new), False) for s, (_, new) in zip(seqs, group, strict=True)]
    batched = backend.forward_batch(calls)
    worst, flips, rows = 0.0, 0, 0
    for (prefix, new), (got, _) in zip(group, batched, strict=True):
        backend.reset()
        backend.forward(prefix.tolist(), 1)
        alone, _ = backend.forward(new, len(new))
        worst = max(worst, float((got - alone).abs().max()))
        flips += int((got.argmax(-1) != alone.argmax(-1)).sum())
        rows += len(new)
    for s in seqs:
        s.reset()
    return {
        "dtype": str(backend.model.dtype).replace("torch.", ""),
        "calls": n,
        "rows": rows,
        "max_abs_logit_diff": worst,
        "argmax_flips": flips,
    }


def hf_generate_rows(model, s, budget) -> list[dict]:
    """Large's own `generate` at each of `s.hf_batches` (`gpu_bench.Settings`), within
    `budget`: eager and static-cache (compiled by transformers on CUDA)."""
    rows = []
    for b in s.hf_batches:
        if not budget.allows(f"transformers generate B={b}"):
            continue
        ids = torch.tensor(prompts(b, s.prompt_tokens, model.config.vocab_size, s.seed))
        ids = ids.to(model.device)
        for mode in ("eager", "static"):
            kw = {"cache_implementation": "static"} if mode == "static" else {}
            runs = 2 if mode == "static" else 1  # the first static run compiles: untimed
            for _ in range(runs):
                t = _timed_generate(model, ids, s.new_tokens, kw)
            label = "static, compiled" if s.device.startswith("cuda") else "static (CPU: eager)"
            rows.append(
                {
                    "setting": "transformers generate (large)",
                    "B": b,
                    "config": "eager" if mode == "eager" else label,
                    "tok_s": round(b * s.new_tokens / t, 1),
                    "wall_s": round(t, 3),
                }
            )
            print(progress(rows[-1:]), flush=True)
    return rows


def _timed_generate(model, ids, n: int, kw: dict) -> float:
    _sync(model.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            **kw,
        )
    _sync(model.device)
    assert out.shape[1] == ids.shape[1] + n
    return time.perf_counter() - t0


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
