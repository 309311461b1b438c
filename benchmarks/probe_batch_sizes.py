"""Seconds per batched call of B sequences on the real pair (llama.cpp), at several context
lengths, for batch sizes beyond `--batch auto`'s candidates: is a larger B worth it here?

    python -m benchmarks.probe_batch_sizes --sizes 1,4,8,16,32 --contexts 32,200 --threads 2

Prints, per context, model and row width (1 token; k + 1 = 5 for large's speculative verify),
seconds per call and per row, and the B `batching.best_batch` picks for token routers (a
one-token step of each model) and for speculative decoding (k = 4 one-token small calls and one
5-token large call). Each sequence's context is fed once, then every B times `--steps` calls of
its first B rows (`batching.probe` re-feeds the context for every B: minutes for 32 x 200
tokens of the large model here). Run it alone on the machine (timings).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def probe_once(engine, sizes, steps, widths, ctx) -> dict:
    """role -> {row width: {B: seconds per call}}, `widths` = role -> row widths to time."""
    from harness.backends import batch_size as batching

    out = {}
    for role in batching.batched_roles(engine):
        owner = engine.backends[role]
        seqs = owner.sequences(max(sizes))
        for s in seqs:
            s.reset()
        owner.forward_batch([(s, [1 + i % 100 for i in range(ctx)], 1, False) for s in seqs])
        out[role] = {}
        for n in widths[role]:
            out[role][n] = {}
            for b in sizes:
                out[role][n][b] = batching.time_calls(owner, seqs[:b], n, steps)
        for s in seqs:
            s.reset()
    return out


def main() -> int:
    from harness.backends import batch_size as batching
    from harness.backends.engine import Engine
    from routers.speculative import Speculative

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,4,8,16,32")
    ap.add_argument("--contexts", default="32,200", help="tokens each sequence holds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=batching.PROBE_STEPS)
    ap.add_argument("--out", help="write the timings as JSON here")
    ap.add_argument("--small", help="small model (default: the packaged pair's)")
    ap.add_argument("--large", help="large model")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    contexts = [int(x) for x in args.contexts.split(",")]
    spec = Speculative(k=4).batch_shape()
    widths = {"small": [1], "large": sorted({1, spec["large"][1]})}
    grow = (args.steps + 1) * len(sizes) * max(sum(w) for w in widths.values())  # timed calls
    engine = Engine.load(args.small, args.large, backend="llama.cpp", threads=args.threads,
                         n_seq=max(sizes), n_ctx=max(contexts) + grow + 64)  # fmt: skip
    out = {}
    for ctx in contexts:
        t = probe_once(engine, sizes, args.steps, widths, ctx)
        for role, by_width in t.items():
            for n, row in by_width.items():
                cells = "  ".join(
                    f"B={b}: {s:.3f} s ({1000 * s / b:.1f} ms/row)" for b, s in row.items()
                )
                print(f"context {ctx} {role} x{n}: {cells}", flush=True)
        token = batching.best_batch({r: t[r][1] for r in t})
        speculative = batching.best_batch({r: t[r][spec[r][1]] for r in t}, spec)
        print(f"context {ctx}: best B {token} for token steps, {speculative} for speculative (k=4)")
        out[ctx] = {"seconds": t, "best_token": token, "best_speculative": speculative}
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
