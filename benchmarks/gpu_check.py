"""The checks that need a GPU: the decoding core over transformers models on CUDA (CI has none).

On the tiny pair of `tests/tiny.py` (float32), moved to the GPU: small-only and large-only equal
transformers' own greedy `generate` on the GPU token for token; the oracle and speculative
decoding (fixed k, and adaptive k with the heuristic schedule) equal large's greedy output; a
cropped and re-fed cache gives the logits of a fresh pass; random routing on the GPU makes the
same decisions and tokens as on the CPU. Prints one line per check; exits 1 if any fails.

    python -m benchmarks.gpu_check            # on a machine with CUDA
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
from tests.tiny import greedy_reference, info, tiny_pair  # noqa: E402

PROMPTS = [[1, 33, 31, 17, 30, 99, 20, 21, 97, 32], [5, 6, 7], [40, 41, 42, 43, 44, 45]]
N = 24


def backends(device: str) -> dict:
    small, large = tiny_pair(2)
    return {r: HFBackend(m.to(device), info(r, m)) for r, m in (("small", small), ("large", large))}


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
            check(f"{row} {args} = {want}'s greedy, prompt of {len(p)}",
                  list(g.token_ids) == ref[want])  # fmt: skip
        on_gpu = generate(gpu, get_router("random", {"p": 0.3}), p, cfg)
        on_cpu = generate(cpu, get_router("random", {"p": 0.3}), p, cfg)
        check(f"random p=0.3 on GPU = on CPU, prompt of {len(p)}",
              (on_gpu.token_ids, on_gpu.provenance) == (on_cpu.token_ids, on_cpu.provenance))  # fmt: skip
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
