"""Nucleus sampling side by side: the whole vocabulary sorted (the definition, as
tests/test_sampling.py writes it) against `harness.core.sampling.sample` (the 1,024 most likely
tokens sorted when they hold the nucleus), for one batched step's 16 rows of the default pair's
151,936-token vocabulary, alternating the two so that both see the same host load.

    python -m benchmarks.sampling_speed [--rounds 10] [--temperature 0.7] [--top-p 0.9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.9)
    a = p.parse_args()

    import torch

    from harness.core.sampling import sample
    from tests.test_sampling import full_sort, logits_of

    rows = [logits_of(s, i) for i, s in enumerate([8.0, 4.0, 3.0, 2.0] * 4)]  # 16 rows
    times: dict[str, list[float]] = {"full sort": [], "prefix": []}
    for r in range(a.rounds):
        for name in times:
            g = torch.Generator().manual_seed(r)
            t0 = time.perf_counter()
            for x in rows:
                if name == "prefix":
                    sample(x, a.temperature, a.top_p, g)
                else:
                    torch.multinomial(full_sort(x, a.temperature, a.top_p), 1, generator=g)
            times[name].append(time.perf_counter() - t0)
    old, new = (statistics.median(t) for t in times.values())
    print(f"16 sampled rows (T {a.temperature}, top-p {a.top_p}, vocab 151,936), median of "
          f"{a.rounds}: full sort {old * 1000:.0f} ms, prefix {new * 1000:.0f} ms, {old / new:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
