"""95% bootstrap intervals for the trained routers' held-out AUCs, from what the training commands saved:

    python -m benchmarks.auc_intervals --query results/train13/query-gsm8k \
        --calib-records results/train13/gsm8k-calib-small/records.jsonl \
        --citer results/train13/citer-lf-gsm8k

query: its calib scores against small's calib answers, prompts resampled. citer: the round-1
MLP of each round (`--rounds 1,2`) on its validation rows (the seeded held-out train examples
`train_mlp` used; needs the label file's hidden states), examples resampled with all their
positions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from harness.training.common import auc


def bootstrap(fn, n: int, reps: int, seed: int = 0) -> tuple[float, float]:
    g = torch.Generator().manual_seed(seed)
    vals = [fn(torch.randint(0, n, (n,), generator=g)) for _ in range(reps)]
    v = torch.tensor([x for x in vals if x == x])  # a resample with one class has no AUC
    return float(v.quantile(0.025)), float(v.quantile(0.975))


def query_auc(folder: Path, records: Path, reps: int) -> str:
    from tasks import get_task

    ck = torch.load(folder / "query.pt", weights_only=True)
    recs = {r["example_id"]: r for r in map(json.loads, records.read_text().splitlines())}
    s = torch.as_tensor(ck["calib_scores"]).float()
    metric = get_task(ck["task"]).metric  # the labels train-query took: small's answer correct
    y = torch.tensor([float(recs[i]["scores"][metric]) >= 1.0 for i in ck["calib_ids"]]).float()
    lo, hi = bootstrap(lambda i: auc(s[i], y[i]), len(y), reps)
    return (
        f"query {folder.name}: calib AUC {auc(s, y):.3f} [{lo:.3f}, {hi:.3f}], n = {len(y)} prompts"
    )


def citer_auc(folder: Path, reps: int, round_: int = 1) -> str:
    from harness.training.citer import FitConfig, _labelled_rows, _validation_rows
    from harness.training.labels import TokenLabels
    from routers.citer import CiterMLP

    ck = torch.load(folder / f"citer_r{round_}.pt", weights_only=True)
    fit = FitConfig(**ck["fit"])
    x, y, groups = _labelled_rows(TokenLabels.load(folder / f"labels_r{round_}.safetensors"))
    val = _validation_rows(groups, fit)
    mlp = CiterMLP(x.shape[1])
    mlp.load_state_dict(ck["state_dict"])
    with torch.no_grad():
        s = torch.sigmoid(mlp.eval()(x[val]))
    y, g = y[val], groups[val]
    rows = [torch.nonzero(g == e).flatten() for e in torch.unique(g)]

    def resampled(idx):
        r = torch.cat([rows[int(i)] for i in idx])
        return auc(s[r], y[r])

    lo, hi = bootstrap(resampled, len(rows), reps)
    return (f"citer {folder.name} round {round_}: validation AUC {auc(s, y):.3f} [{lo:.3f}, {hi:.3f}], "
            f"n = {len(rows)} held-out examples ({len(y)} positions); "
            f"stored {ck['stats'].get('val_auc', float('nan')):.3f}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--query", type=Path)
    p.add_argument("--calib-records", type=Path)
    p.add_argument("--citer", type=Path)
    p.add_argument("--rounds", default="1", help="CITER rounds to report, comma-separated")
    p.add_argument("--reps", type=int, default=1000)
    a = p.parse_args()
    if a.query:
        print(query_auc(a.query, a.calib_records, a.reps))
    if a.citer:
        for r in a.rounds.split(","):
            print(citer_auc(a.citer, a.reps, int(r)))


if __name__ == "__main__":
    main()
