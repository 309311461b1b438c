"""The reward model's scores on its two backbones: transformers (bf16, the weights it was trained
on) and llama.cpp (the truncated GGUF, `harness.backends.reward_model.LlamaCppRewardBackend`), on the same tokens.

    python scripts/reward_backbone_check.py --checkpoint docs/data/first-release-routers/reward.pt \\
        --records runs/validity/gsm8k-small/records.jsonl --limit 20 --threads 2

For the first --limit records of a small-only gsm8k run (prompt + small's tokens), prints the
Pearson correlation of the per-token scores, their largest difference, and for the thresholds
that defer 10%, 20% and 35% of the transformers scores, the share each backbone defers and the
share of tokens on which the two decide differently.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--records", required=True, help="records.jsonl of a small-only gsm8k run")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()

    import torch

    from harness.backends.engine import Engine
    from harness.backends.reward_model import load_reward_backend, reward_backend_for
    from harness.training.calibrate import backend_scores
    from routers.reward import calibrated_threshold
    from tasks import get_task

    torch.set_num_threads(args.threads)
    engine = Engine.load(backend="llama.cpp", threads=args.threads)
    llama = reward_backend_for(args.checkpoint, engine)
    hf = load_reward_backend(args.checkpoint, "bfloat16", "cpu", engine.tokenizer)
    examples = {ex.id: ex for ex in get_task("gsm8k").split("test")}
    rows = [json.loads(x) for x in open(args.records, encoding="utf-8")][: args.limit]
    a, b = [], []
    for r in rows:
        prompt = engine.encode(examples[r["example_id"]].messages)
        ids = r["generation"]["token_ids"]
        a += backend_scores(hf, prompt, ids)
        b += backend_scores(llama, prompt, ids)
    a, b = np.array(a), np.array(b)
    print(
        f"{len(rows)} examples, {len(a)} tokens; backbones: transformers bf16 vs {llama.info.backend}"
    )
    print(f"pearson r {np.corrcoef(a, b)[0, 1]:.4f}; max |difference| {np.abs(a - b).max():.4f}")
    for share in (0.1, 0.2, 0.35):
        t = calibrated_threshold(a, share)
        da, db = a < t, b < t
        print(
            f"threshold deferring {share:.0%} of transformers scores: transformers defers "
            f"{da.mean():.3f}, llama.cpp {db.mean():.3f}; decisions differ on {(da != db).mean():.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
