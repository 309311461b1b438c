#!/bin/bash
# Issue 12 (batched evaluation): the real-pair measurements behind the README's batching table.
# Resumable (every step is a resumable run under the heavy lock); run from the repository root:
#
#   nohup bash scripts/issue12_runs.sh >> /work/logs/issue12-runs.log 2>&1 &
#   python -m benchmarks.batch_speed --table                       # the throughput table so far
#   python -m benchmarks.batch_speed --pair runs/validity/gsm8k-small runs/batch/small-100-b16 --margins
set -uo pipefail
LOCK=${LOCK:-/tmp/hybridbench-heavy.lock}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
THREADS=${THREADS:-2}
# 1. 100 examples, small-only, unbatched (the issue-11 run folder) and at B = 16 (what --batch auto
#    chose on this machine): per-example agreement, and examples/hour with less draining
flock "$LOCK" hybridbench run --task gsm8k --router small --backend llama.cpp --threads "$THREADS" \
    --batch 1 --limit 100 --out runs/validity/gsm8k-small
flock "$LOCK" hybridbench run --task gsm8k --router small --backend llama.cpp --threads "$THREADS" \
    --batch 16 --limit 100 --out runs/batch/small-100-b16
# 2. examples per hour at B = 1, 4, 8, 16 on the same 16 gsm8k test examples, four routers
python -m benchmarks.batch_speed --routers small,random --limit 16 --threads "$THREADS" --out runs/batch
python -m benchmarks.batch_speed --routers speculative,large --limit 16 --threads "$THREADS" --out runs/batch
echo "== $(date -u +%H:%M:%S) done"
