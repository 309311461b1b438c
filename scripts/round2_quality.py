"""How good are label-free CITER's round-2 answers? An early look before issue 14's test rows.

    python scripts/round2_quality.py results/train13/citer-lf-gsm8k \
        --small-records results/train13/gsm8k-train-small/records.jsonl

Round 2 decodes every train example with the round-1 router in the loop (`trajectories_r2.jsonl`,
greedy, the task's budget). This scores those answers with the task's own scorer and sets them
beside small's greedy answers to the same prompts, paired (`metrics.paired_difference`: 95%
bootstrap over examples):
overall, and apart on the examples the round-1 MLP never trained on (its seeded validation
examples, the same rows as `scripts/auc_intervals.py`) and on those it did. Train examples are
not test examples and there is no random control here: this says whether the router helps at
all and how much of that is in-sample; issue 14's paired test rows are the result.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from harness.core.loop import cut_at_stop


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a train-citer --mode label_free output folder")
    p.add_argument("--small-records", type=Path, required=True,
                   help="small's run over the same train examples (records.jsonl)")  # fmt: skip
    args = p.parse_args()

    from harness.backends.models import gguf_file, gguf_tokenizer
    from harness.evaluation.runner import load_records
    from harness.metrics.quality import paired_difference, quality
    from harness.training.citer import FitConfig, _labelled_rows, _validation_rows
    from harness.training.labels import TokenLabels
    from tasks import get_task

    ck = torch.load(args.folder / "citer_r1.pt", weights_only=True)
    task = get_task(ck["task"])
    tok = gguf_tokenizer(*gguf_file(ck["models"]["small"]))
    small = load_records(args.small_records)
    examples = {e.id: e for e in task.split("train", ck["split_seed"])}
    rows = [json.loads(x) for x in (args.folder / "trajectories_r2.jsonl").read_text().splitlines()]
    hybrid, tokens, large, counted = [], 0, 0, 0
    for r in rows:
        text = cut_at_stop(tok.decode(r["token_ids"], skip_special_tokens=True), task.stop)
        hybrid.append({"example_id": r["id"], "scores": task.score(examples[r["id"]], text)})
        if "large" in r:  # lines written before the field existed lack it
            tokens, large, counted = tokens + len(r["token_ids"]), large + r["large"], counted + 1

    data = TokenLabels.load(args.folder / "labels_r1.safetensors")
    _, _, groups = _labelled_rows(data)
    val = _validation_rows(groups, FitConfig(**ck["fit"]))
    held = {data.example_ids[int(e)] for e in torch.unique(groups[val])}
    print(f"{args.folder}: {len(rows)} round-2 answers ({task.name}, train split)")
    if counted:
        print(f"large-token share {large / tokens:.3f} over the {counted} answers that record it")
    for name, keep in (("all", lambda i: True), ("held out from round 1's MLP", held.__contains__),
                       ("trained on", lambda i: i not in held)):  # fmt: skip
        mine = [r for r in hybrid if keep(r["example_id"])]
        if mine:
            d = paired_difference(mine, list(small.values()), task.metric)
            print(f"{name}: n = {d['n']}: round 2 {quality(mine, task.metric):.3f}, small "
                  f"{quality([small[r['example_id']] for r in mine], task.metric):.3f}, "
                  f"difference {d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]")  # fmt: skip


if __name__ == "__main__":
    main()
