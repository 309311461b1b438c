#!/bin/bash
# The published leaderboard: the sweeps that made reports/published/{gsm8k,mbpp} and their reports.
# Run from the repository root after `pip install -e ".[models,reports]"`. Resumable: re-running
# skips finished runs. Router checkpoints: reports/published/routers/ (see README.md there).
set -euo pipefail
R=reports/published/routers
common=(--split test --targets 0.1,0.3 --threads 2
        --router-arg entropy:threshold=1.0 --router-arg confidence:threshold=0.7
        --router-arg reward:checkpoint=$R/reward.pt
        --router-arg citer:path=$R/citer-gsm8k.pt
        --router-arg query:path=$R/query-gsm8k.pt)
routers=small,large,reward,citer,query,random_query,random,entropy,confidence,speculative,oracle
hybridbench sweep --task gsm8k --limit 10 --max-new-tokens 200 --routers $routers "${common[@]}" \
    --router-arg reward:calibration=$R/reward-calib-gsm8k.json --out reports/published/gsm8k
# random at the large-token share CITER reached, for the same-share comparison (issue 5)
P=$(python -c "import json; print(round(json.load(open('reports/published/gsm8k/citer__default/summary.json'))['large_token_share'], 3))")
hybridbench sweep --task gsm8k --limit 10 --max-new-tokens 200 --routers random --router-arg random:p=$P \
    --split test --threads 2 --out reports/published/gsm8k
hybridbench sweep --task mbpp --limit 10 --max-new-tokens 160 --routers $routers "${common[@]}" \
    --router-arg reward:calibration=$R/reward-calib-mbpp.json --out reports/published/mbpp
hybridbench report reports/published/gsm8k
hybridbench report reports/published/mbpp
