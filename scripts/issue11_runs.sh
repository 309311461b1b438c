#!/bin/bash
# Issue 11: the small-only and large-only runs behind docs/issue11-results.md, then the reference
# check. Run from the repository root (llama-cpp-python installed); resumable: re-running skips
# finished examples, so after an interruption run it again. Every model run holds the heavy
# lock, one chunk at a time, so other heavy jobs can take turns between chunks:
#
#   nohup bash scripts/issue11_runs.sh >> /work/logs/issue11-runs.log 2>&1 &
#   python scripts/task_validity.py runs/validity          # the table, at any time
#
# Order: gsm8k and mbpp's first 100 examples unbatched, the reference check on them, then the
# rest batched.
#
# Budgets are each task's own max_new_tokens (tasks/*.py), so the runs use what
# `hybridbench run --task T` uses. Sizes: the issue's (>= 200 test examples for gsm8k, mbpp,
# mmlu; all 85 of humaneval's test split; >= 50 for the others; cnn_dm has only the project's
# 8 written paragraphs, so it runs on all of them).
# ONLY="task ..." runs those tasks' lines alone (scripts/heavy_chain.sh: the ones still to measure).
set -uo pipefail
ONLY=${ONLY:-}
LOCK=${LOCK:-/tmp/hybridbench-heavy.lock}
OUT=${OUT:-runs/validity}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi

want() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

run() { # TASK ROUTER LIMIT [run args...]: one chunk, under the lock
    local task=$1 router=$2 limit=$3 rec
    want "$task" || return 0
    shift 3
    rec="$OUT/$task-$router/records.jsonl"
    if [ -f "$OUT/$task-$router/summary.json" ] && [ -f "$rec" ] && \
        [ "$(grep -c '"error": ""' "$rec")" -ge "$limit" ]; then
        return 0 # done already: skip loading the pair
    fi
    echo "== $(date -u +%H:%M:%S) $task $router --limit $limit $*"
    flock "$LOCK" hybridbench run --task "$task" --router "$router" --backend llama.cpp \
        --threads 2 --limit "$limit" --out "$OUT/$task-$router" "$@"
    local rc=$?
    [ $rc -eq 0 ] || echo "!! $task $router --limit $limit exited $rc"
}

both() { # TASK TOTAL CHUNK [run args...]: small and large in step, CHUNK examples at a time
    local task=$1 total=$2 chunk=$3 n
    shift 3
    for ((n = chunk; n < total + chunk; n += chunk)); do
        n=$((n < total ? n : total))
        run "$task" small "$n" "$@"
        run "$task" large "$n" "$@"
    done
}

# gsm8k's and mbpp's first 100 examples decode one at a time (--batch 1): the reference check
# compares them token for token with llama.cpp's own unbatched completion, and batched llama.cpp
# rows round differently (README, "Batched evaluation"). Examples 101-200 and the other tasks
# batch (--batch auto); the manifest records each session's batch size.
run gsm8k small 20 --batch 1 # the pilot that set gsm8k's budget (docs/issue11-results.md)
run gsm8k large 20 --batch 1
both gsm8k 100 50 --batch 1
both mbpp 100 50 --batch 1
# the reference check as soon as its examples exist (it resumes; first 50, then 100)
for n in 50 100; do
    want reference || break
    echo "== $(date -u +%H:%M:%S) reference check --limit $n"
    flock "$LOCK" python -m benchmarks.reference_check --runs "$OUT" --tasks gsm8k,mbpp \
        --limit "$n" --out runs/reference --threads 2
done
both gsm8k 200 100
both mbpp 200 100
both humaneval 85 85
both mmlu 228 76 --task-arg per_subject=4
both math500 50 25
both arc_challenge 50 50
both commonsense_qa 50 50
both cnn_dm 8 8 --split all
echo "== $(date -u +%H:%M:%S) done"
