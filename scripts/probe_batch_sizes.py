"""Seconds per batched call of B sequences on the real pair (llama.cpp), at several context
lengths, for batch sizes beyond `--batch auto`'s candidates: is a larger B worth it here?

    python scripts/probe_batch_sizes.py --sizes 1,4,8,16,32 --contexts 32,400 --threads 2

Prints, per context and model, seconds per call and per row, and the B `best_batch` picks (a
step of each model per token; `--shape speculative` weighs k one-token small calls and one
(k + 1)-token large call). Run it alone on the machine (timings).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    from harness import batching
    from harness.engine import Engine
    from routers.speculative import Speculative

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,4,8,16,32")
    ap.add_argument("--contexts", default="32,400", help="tokens each sequence holds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=batching.PROBE_STEPS)
    ap.add_argument("--shape", choices=("token", "speculative"), default="token")
    ap.add_argument("--out", help="write the timings as JSON here")
    ap.add_argument("--small", help="small model (default: the packaged pair's)")
    ap.add_argument("--large", help="large model")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    contexts = [int(x) for x in args.contexts.split(",")]
    shape = Speculative(k=4).batch_shape() if args.shape == "speculative" else None
    engine = Engine.load(args.small, args.large, backend="llama.cpp", threads=args.threads, n_seq=max(sizes),
                         n_ctx=max(contexts) + 64)  # fmt: skip
    out = {}
    for ctx in contexts:
        times = batching.probe(engine, sizes, args.steps, shape, prompt=ctx)
        out[ctx] = {"seconds": times, "best": batching.best_batch(times, shape)}
        for role, t in times.items():
            row = "  ".join(f"B={b}: {s:.3f} s ({1000 * s / b:.1f} ms/row)" for b, s in t.items())
            print(f"context {ctx} {role}: {row}")
        print(f"context {ctx}: best B = {out[ctx]['best']} ({args.shape} steps)")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
