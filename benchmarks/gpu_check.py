"""The checks that need a GPU: the decoding core over transformers models on CUDA (CI has none).

On the tiny pair of `tests/tiny.py` (float32), moved to the GPU: small-only and large-only equal
transformers' own greedy `generate` on the GPU token for token; the oracle and speculative
decoding (fixed k, and adaptive k with the heuristic schedule) equal large's greedy output; a
cropped and re-fed cache gives the logits of a fresh pass; random routing on the GPU makes the
same decisions and tokens as on the CPU; small's per-token summary (top-1 probability, entropy,
top-2 margin) computed on the GPU equals the CPU's up to float rounding, and the score routers that
read it (entropy, confidence, and the example package's margin router, loaded by import path) defer
the same tokens on the GPU as on the CPU; every pass of short feeds replayed as a captured CUDA
graph of its bucketed shape (catch-ups, verifies, decode steps; slots feeding different numbers
of tokens) equals the ragged eager pass. Every generation above runs through those graphs (the
default on CUDA). Prints one line per check; exits 1 if any fails.

    PYTHONPATH=examples/margin-router python -m benchmarks.gpu_check     # on a machine with CUDA
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.backends.hf import HFBackend  # noqa: E402
from harness.core.loop import DecodeConfig  # noqa: E402
from harness.core.scheduler import generate  # noqa: E402
from routers import get_router  # noqa: E402
from tests.tiny import FEED_ROUNDS, greedy_reference, info, prefixes, tiny_pair  # noqa: E402

PROMPTS = [[1, 33, 31, 17, 30, 99, 20, 21, 97, 32], [5, 6, 7], [40, 41, 42, 43, 44, 45]]
N = 24


def backends(device: str) -> dict:
    small, large = tiny_pair(2)
    return {r: HFBackend(m.to(device), info(r, m)) for r, m in (("small", small), ("large", large))}


SCORE_ROUTERS = (  # (router, the summary field it reads)
    ("entropy", "entropy"),
    ("confidence", "top_prob"),
    ("margin_router.router:MarginRouter", "margin"),
)


def score_router_checks(gpu: dict, cpu: dict, cfg: DecodeConfig, check) -> None:
    """Small's summary on `gpu`'s device against `cpu`'s, and the score routers' deferrals;
    each router's threshold lies midway between the two middle values of its score over the
    prompts' rows, so that it defers some tokens and keeps others, and no scored token (the last
    prompt row scores the first drafted token) sits on it, where float rounding decides."""
    rows = {}
    for name, side in (("gpu", gpu), ("cpu", cpu)):
        b = side["small"]
        rows[name] = []
        for p in PROMPTS:
            b.reset()
            rows[name].append(b.forward(p, len(p), level="stats")[0])
    for field in ("top_prob", "entropy", "margin"):
        err = max(
            float((getattr(g, field) - getattr(c, field)).abs().max())
            for g, c in zip(rows["gpu"], rows["cpu"], strict=True)
        )
        same_argmax = all(
            bool((g.argmax == c.argmax).all())
            for g, c in zip(rows["gpu"], rows["cpu"], strict=True)
        )
        check(
            f"small's {field} on GPU = on CPU, {len(PROMPTS)} prompts",
            same_argmax and err < 1e-5,
            f"max |diff| {err:.2e}",
        )
    for router, field in SCORE_ROUTERS:
        v = torch.cat([getattr(c, field) for c in rows["cpu"]]).sort().values
        threshold = float(v[len(v) // 2 - 1] + v[len(v) // 2]) / 2  # between two rows, on none
        deferred = total = 0
        same = True
        for p in PROMPTS:
            g = generate(gpu, get_router(router, {"threshold": threshold}), p, cfg)
            c = generate(cpu, get_router(router, {"threshold": threshold}), p, cfg)
            same &= (g.token_ids, g.provenance) == (c.token_ids, c.provenance)
            deferred += sum(c.provenance)  # 1 = a token large wrote
            total += len(c.provenance)
        check(
            f"{router} threshold {threshold:.4f} on GPU = on CPU, {len(PROMPTS)} prompts",
            same and 0 < deferred < total,
            f"{deferred}/{total} tokens by large",
        )


def static_pass_checks(check) -> None:
    """The captured static passes (every call of a batch padded to a bucketed shape, replayed as
    a CUDA graph) against the ragged eager pass on the GPU, on batches whose slots feed
    different numbers of tokens (`FEED_ROUNDS`, as tests/test_hf_static.py runs them eagerly on
    the CPU): every logits and hidden row asked for, and a step after the rounds."""
    large = tiny_pair(2)[1].to("cuda")
    for b, rounds in FEED_ROUNDS.items():
        paths = {
            step: HFBackend(large, info("large", large), step=step) for step in ("ragged", "graph")
        }
        seqs = {step: bk.sequences(b) for step, bk in paths.items()}
        for step in paths:
            for s, p in zip(seqs[step], prefixes(b), strict=True):
                s.forward(p, 1)
        g, worst = torch.Generator().manual_seed(b), 0.0
        for calls in rounds:
            feeds = {s: torch.randint(3, 120, (n,), generator=g).tolist() for s, n, _ in calls}
            out = {
                step: bk.forward_batch([(seqs[step][s], feeds[s], r, True) for s, _, r in calls])
                for step, bk in paths.items()
            }
            for got, want in zip(out["graph"], out["ragged"], strict=True):
                worst = max(
                    worst,
                    float((got[0] - want[0]).abs().max()),
                    float((got[1] - want[1]).abs().max()),
                )
        after = {step: seqs[step][b - 1].forward([11], 1)[0] for step in paths}
        worst = max(worst, float((after["graph"] - after["ragged"]).abs().max()))
        graph = paths["graph"]
        feeds = sorted({shape.feed for shape, v in graph.graphs.items() if v is not None})
        check(
            f"captured static passes = ragged pass, B = {b}, feeds {feeds}",
            worst < 1e-4 and not graph.graph_failures and max(feeds, default=0) > 1,
            f"max |diff| {worst:.2e}, {len(graph.graphs)} graphs, "
            f"failures: {graph.graph_failures or 'none'}",
        )


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device here")
        return 2
    gpu, cpu = backends("cuda"), backends("cpu")
    cfg = DecodeConfig(max_new_tokens=N)
    failed = 0

    def check(name: str, ok: bool, detail: str = "") -> None:
        nonlocal failed
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}{f': {detail}' if detail else ''}", flush=True)

    for p in PROMPTS:
        ref = {r: greedy_reference(gpu[r], p, N) for r in ("small", "large")}
        for row, args, want in (
            ("small", {}, "small"),
            ("large", {}, "large"),
            ("oracle", {}, "large"),
            ("speculative", {"k": 3}, "large"),
            ("speculative", {"adaptive": True, "schedule": "heuristic"}, "large"),
        ):
            g = generate(gpu, get_router(row, args), p, cfg)
            check(
                f"{row} {args} = {want}'s greedy, prompt of {len(p)}",
                list(g.token_ids) == ref[want],
            )
        on_gpu = generate(gpu, get_router("random", {"p": 0.3}), p, cfg)
        on_cpu = generate(cpu, get_router("random", {"p": 0.3}), p, cfg)
        check(
            f"random p=0.3 on GPU = on CPU, prompt of {len(p)}",
            (on_gpu.token_ids, on_gpu.provenance) == (on_cpu.token_ids, on_cpu.provenance),
        )
    score_router_checks(gpu, cpu, cfg, check)
    static_pass_checks(check)
    # rollback: feed 3 tokens, crop 2 of them, feed 2 others = a fresh pass over the same tokens
    b = gpu["large"]
    b.reset()
    b.forward(PROMPTS[0], 1)
    b.forward([50, 51, 52], 1)
    b.crop(len(PROMPTS[0]) + 1)
    got = b.forward([60, 61], 1)[0][0]
    fresh = backends("cuda")["large"]
    fresh.reset()
    want = fresh.forward(PROMPTS[0] + [50, 60, 61], 1)[0][0]
    err = float((got - want).abs().max())
    check("crop then re-feed = fresh pass (large, float32)", err < 1e-4, f"max |diff| {err:.2e}")
    print(f"{failed} failed" if failed else "all passed", torch.cuda.get_device_name())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
