"""How far batching moves the transformers backend's logits, in float32 and bfloat16 (CPU).

    flock /tmp/hybridbench-heavy.lock python -m benchmarks.hf_batch_numerics --shape small

Random weights of the default pair's small (or large) shape (`harness.evaluation.random_pair`),
8 ragged calls (rows differ in cache length and new tokens) batched in one pass against each
call alone (`harness.evaluation.gpu_bench.batch_numerics`), in each dtype: the largest
|difference| of a logit, and how many greedy tokens differ. `hybridbench bench-gpu` records the
same on the GPU (`batch_numerics` in its JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout


def main(argv=None) -> int:
    import torch

    from harness.evaluation import random_pair
    from harness.evaluation.gpu_bench import batch_numerics

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="small", choices=("small", "large", "tiny"))
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=8)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.shape == "tiny":
        config = random_pair.model_config(random_pair.TINY_SHAPES["large"], random_pair.TINY_COMMON)
    else:
        shape = random_pair.QWEN_CODER_SHAPES[args.shape]
        config = random_pair.model_config(shape, random_pair.QWEN_COMMON)
    out = []
    for name in args.dtypes.split(","):
        model = random_pair.random_model(config, "cpu", getattr(torch, name), seed=0)
        out.append({"shape": args.shape, **batch_numerics(random_pair.hf_backend(model, "m", 256),
                                                         args.calls)})  # fmt: skip
        print(json.dumps(out[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
