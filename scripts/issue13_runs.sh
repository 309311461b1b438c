#!/bin/bash
# Issue 13: the trained routers at scale, on the real pair (llama.cpp, batched). Resumable: every
# step is a resumable command under the heavy lock; after an interruption run this again.
#
#   nohup bash scripts/issue13_runs.sh >> /work/logs/issue13-runs.log 2>&1 &
#
# Sizes are what the splits hold (tasks/base.py's seeded 38/10/52 split of the only split the
# offline data has): gsm8k train 503, calib 138; mbpp train 205, calib 40. --limit 1000 = all.
set -uo pipefail
LOCK=${LOCK:-/tmp/hybridbench-heavy.lock}
OUT=${OUT:-results/train13}
THREADS=${THREADS:-2}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
# MODEL_ARGS, ALL, PROMPTS and LAYERS change the pair and sizes for a rehearsal on tiny models
# (tests/test_chain_rehearsal.py); the real chain leaves them unset
MODELS=(--backend llama.cpp --threads "$THREADS" --batch auto ${MODEL_ARGS:-})
ALL=${ALL:-1000}
PROMPTS=${PROMPTS:-1000}

step() { # a command under the lock, timed, its exit status reported
    echo "== $(date -u +%H:%M:%S) $*"
    flock "$LOCK" "$@"
    local rc=$?
    [ $rc -eq 0 ] || echo "!! exited $rc: $*"
}

has_stat() { # CHECKPOINT KEY: does the checkpoint exist with KEY in its stats?
    [ -f "$1" ] && python -c "import sys, torch
sys.exit(sys.argv[2] not in torch.load(sys.argv[1], weights_only=True).get('stats', {}))" "$1" "$2"
}

for task in gsm8k mbpp; do
    # 1. small's greedy answers on train: the query router's labels (correct or not) and the
    #    label-free CITER trajectories; on calib: CITER's calibration trajectories (label-free),
    #    and the threshold routers' calibration in scripts/issue14_runs.sh
    for split in train calib; do
        step hybridbench run --task $task --router small --split $split --limit $ALL \
            "${MODELS[@]}" --out "$OUT/$task-$split-small"
    done
    # 2. query router (labels: small's own answers), tau for 20% of calib prompts; share= re-sets it;
    #    its held-out AUC and log loss vs the prior on calib (small's calib answers as labels).
    #    Skipped once its checkpoint has those (a checkpoint from before them is trained again)
    if ! has_stat "$OUT/query-$task/query.pt" calib; then
        step hybridbench train-query --task $task --train-limit $ALL --calib-limit $ALL \
            --share 0.2 --small-records "$OUT/$task-train-small/records.jsonl" \
            --calib-records "$OUT/$task-calib-small/records.jsonl" "${MODELS[@]}" \
            --out "$OUT/query-$task"
    fi
    # 3. CITER, label-free (small vs large agreement along small's answers), two rounds
    #    (skipped once its final checkpoint has its validation AUC, as for the query router)
    has_stat "$OUT/citer-lf-$task/citer.pt" val_auc || step hybridbench train-citer \
        --task $task --mode label_free --train-limit $ALL --calib-limit $ALL \
        --trajectories "$OUT/$task-train-small/records.jsonl,$OUT/$task-calib-small/records.jsonl" \
        --target-share 0.2 "${MODELS[@]}" --out "$OUT/citer-lf-$task"
done
for task in gsm8k mbpp; do
    # 4. CITER with the reference shortcut (gsm8k solutions, mbpp gold code) and rollouts, two
    #    rounds. gsm8k rollouts stop at 768 tokens: of 141 gsm8k answers that ended by
    #    themselves the longest had 707 (docs/issue11-results.md), and a rollout starts part-way
    #    through an answer; only repetition loops, wrong anyway, run longer.
    cap=0; [ $task = gsm8k ] && cap=768
    has_stat "$OUT/citer-ref-$task/citer.pt" val_auc || step hybridbench train-citer \
        --task $task --mode reference --train-limit $ALL \
        --calib-limit $ALL --target-share 0.2 --rollout-tokens $cap "${MODELS[@]}" \
        --out "$OUT/citer-ref-$task"
done
# 5. the reward model's preference data: 1,000 prompts from five tasks' train splits, full responses
step hybridbench reward-data --out "$OUT/reward-data" --prompts "$PROMPTS" --max-new-tokens 0 \
    "${MODELS[@]}"
# 6. the reward model: head-only on frozen backbones of two depths (small's first 6 layers, a
#    truncated GGUF at run time; all 24, read from small's own pass at run time, `SmallHead`),
#    linear and MLP heads; the one with the best held-out preference accuracy becomes
#    $OUT/reward/reward.pt (what scripts/issue14_runs.sh uses); metrics.json of each says why
for layers in ${LAYERS:-6 24}; do
    for head in linear mlp; do
        step hybridbench train-reward --data "$OUT/reward-data" --layers $layers --head $head \
            --threads "$THREADS" --out "$OUT/reward-L$layers-$head"
    done
done
best=$(python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
held = {d.name: json.loads((d / "metrics.json").read_text())["final"]["heldout"]
        for d in Path(sys.argv[1]).glob("reward-L*") if (d / "metrics.json").is_file()}
runs = sorted(((h["acc"], name) for name, h in held.items()), reverse=True)
for acc, name in runs:  # the same held-out prompts for all: a choice among them, not a test
    lo, hi = held[name]["acc_ci"]
    print(f"  {name}: held-out preference accuracy {acc:.3f} [{lo:.3f}, {hi:.3f}]", file=sys.stderr)
print(runs[0][1] if runs else "")
PY
)
if [ -n "$best" ]; then
    echo "== reward model chosen: $best"
    # its calibration on each task's calib split is scripts/issue14_runs.sh's (over small's
    # calib answers, decoded once for every threshold router)
    mkdir -p "$OUT/reward" && cp "$OUT/$best/reward.pt" "$OUT/$best/metrics.json" "$OUT/reward/"
fi
echo "== $(date -u +%H:%M:%S) done"
