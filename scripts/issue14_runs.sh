#!/bin/bash
# Issue 14: the leaderboard's second edition, on the real pair (llama.cpp, batched), resumable:
# every step is a resumable command under the heavy lock; after an interruption run this again.
#
#   nohup bash scripts/issue14_runs.sh >> /work/logs/issue14-runs.log 2>&1 &
#   hybridbench report results/edition2/gsm8k                          # the leaderboard so far
#   python scripts/chain_status.py results/edition2                     # what is done, what remains
#   python scripts/publish_edition.py results/edition2 reports/published --tasks gsm8k,mbpp,humaneval
#   cat results/edition2-rerun/mbpp/compare.json                        # a rerun of four rows, compared
#
# Rows, per task, on the same first N test examples (gsm8k 200, mbpp 200, humaneval all 85):
#   controls   small and large, decoded here like every other row (B = 16, one pass over the N
#              examples; issue 11's runs of them grew over sessions, half unbatched, so their
#              throughput is not comparable), oracle (replayed along large's answers,
#              --reuse-answers), speculative (k=4, and adaptive k)
#   token      random p, entropy, confidence, reward, citer (issue 13's routers, when their
#              checkpoints exist; all calibrated along small's calib answers) at target shares
#              0.1, 0.2, 0.35
#   query      query (issue 13), random_query at prompt shares 0.1, 0.2, 0.35, their answers
#              reused from this edition's small and large rows (`--reuse-answers`)
#   anchor     large-only on the first 48 examples, on a machine that decoded less of large's
#              row (TASK/anchors/MACHINE_ID): the report divides each row's throughput by
#              large-only's on the machine(s) the row ran on (harness/metrics/machines.py)
# Thresholds come from calib (`hybridbench calibrate` over small's calib answers), never by hand.
set -uo pipefail
LOCK=${LOCK:-/tmp/hybridbench-heavy.lock}
OUT=${OUT:-results/edition2}
TRAINED=${TRAINED:-results/train13}
THREADS=${THREADS:-2}
TARGETS=0.1,0.2,0.35
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
# MODEL_ARGS, LIMIT and ALL change the pair and the sizes for a rehearsal on tiny models
# (tests/test_chain_rehearsal.py); the real chain leaves them unset
MODELS=(--backend llama.cpp --threads "$THREADS" --batch auto ${MODEL_ARGS:-})
ALL=${ALL:-1000}
ANCHOR=${ANCHOR:-48} # a machine's speed anchor: large-only on the first ANCHOR test examples

step() {
    echo "== $(date -u +%H:%M:%S) $*"
    flock "$LOCK" "$@"
    local rc=$?
    [ $rc -eq 0 ] || echo "!! exited $rc: $*"
}

if [ "${1:-}" = "--collect" ]; then
    # this edition's own rows replayed on a lent GPU machine (docs/issue14-device.md, session 23):
    # gsm8k's leaderboard shows them; the earlier GPU sessions replayed rows made for the purpose
    # (runs/device, runs/batch: not this edition's), so they stay in docs/ and out of the edition
    mkdir -p "$OUT/gsm8k/device" && cp docs/data/device-latency-h100*-edition2.json "$OUT/gsm8k/device/"
    exit 0
fi

anchor_folder() { # TASK_FOLDER: where this machine's speed anchor goes when it needs one
    # (large-only decoded here on fewer than ANCHOR examples of the task: speed ratios are taken
    # within one machine, harness/metrics/machines.py); prints nothing when it needs none
    python - "$1" "$ANCHOR" <<'PY'
import json, sys
from pathlib import Path
from harness.backends.batch_size import machine_id
from harness.metrics.machines import by_machine, session_machines
folder, n, here = Path(sys.argv[1]), int(sys.argv[2]), machine_id()
large = folder / "large__default" / "manifest.json"
ms = {"here": {"sessions": [{"machine": {"id": here}}]}}
if large.is_file():
    ms["large"] = json.loads(large.read_text(encoding="utf-8"))
labels = session_machines(ms)
done = by_machine(ms.get("large", {}), labels.get("large", [])).get(labels["here"][0], {})
if done.get("examples", 0) < n:
    print(folder / "anchors" / here)
PY
}

limit_of() { [ -n "${LIMIT:-}" ] && echo "$LIMIT" && return; case $1 in humaneval) echo 85 ;; *) echo 200 ;; esac; }

for task in gsm8k mbpp humaneval; do
    n=$(limit_of $task)
    cal="$OUT/calibration/$task"
    # small's greedy answers on calib, scored by each threshold router: issue 13's run of them
    # where it made one (gsm8k, mbpp; same prompts, budget and models), else decoded here
    answers="$TRAINED/$task-calib-small"
    if [ ! -f "$answers/summary.json" ]; then
        answers="$cal/small-calib"
        step hybridbench run --task $task --router small --split calib --limit $ALL \
            "${MODELS[@]}" --out "$answers"
    fi
    for r in entropy confidence; do
        [ -f "$cal/$r.json" ] || step hybridbench calibrate --router $r --task $task --limit $ALL \
            --records "$answers/records.jsonl" "${MODELS[@]}" --out "$cal/$r.json"
    done
    args=(--router-arg "entropy:calibration=$cal/entropy.json"
          --router-arg "confidence:calibration=$cal/confidence.json")
    # the trained routers (issue 13's must-show) before confidence, the second untrained
    # baseline: with a row taking a good part of a session here, the order is what gets published first
    routers=oracle,speculative,random,entropy,random_query
    if [ -f "$TRAINED/reward/reward.pt" ]; then
        [ -f "$cal/reward.json" ] || step hybridbench calibrate --router reward \
            --checkpoint "$TRAINED/reward/reward.pt" --task $task --limit $ALL \
            --records "$answers/records.jsonl" "${MODELS[@]}" --out "$cal/reward.json"
        routers+=,reward
        args+=(--router-arg "reward:checkpoint=$TRAINED/reward/reward.pt"
               --router-arg "reward:calibration=$cal/reward.json")
    fi
    for r in citer query; do # issue 13 trains them on gsm8k and mbpp; humaneval runs them as transfer
        src=$task; [ $task = humaneval ] && src=mbpp
        ck="$TRAINED/$r-$src/$r.pt"; [ $r = citer ] && ck="$TRAINED/citer-ref-$src/citer.pt"
        [ -f "$ck" ] || continue
        routers+=,$r && args+=(--router-arg "$r:path=$ck")
        # CITER's threshold from its scores along small's own calib answers, as the other token
        # routers' (its checkpoint's own calib scores lie along the reference answers: on gsm8k
        # they realized about half the share asked, docs/issue13-results.md, session 25)
        if [ $r = citer ]; then
            [ -f "$cal/citer.json" ] || step hybridbench calibrate --router citer --checkpoint "$ck" \
                --task $task --limit $ALL --records "$answers/records.jsonl" "${MODELS[@]}" \
                --out "$cal/citer.json"
            args+=(--router-arg "citer:calibration=$cal/citer.json")
        fi
    done
    routers+=,confidence
    # small-only and large-only first: the query routers and the oracle take their answers from
    # them (greedy: the same tokens; only the routing prefill / one teacher-forced small pass
    # runs, their throughput is modeled, README "Reusing answers")
    step hybridbench sweep --task $task --split test --limit $n --routers small,large \
        "${MODELS[@]}" --out "$OUT/$task"
    # the speed anchor: every row's throughput is compared with large-only's on the same machine
    anchor=$(anchor_folder "$OUT/$task")
    [ -n "$anchor" ] && step hybridbench run --task $task --router large --split test \
        --limit $ANCHOR "${MODELS[@]}" --out "$anchor"
    reuse=(--reuse-answers "$OUT/$task/small__default,$OUT/$task/large__default")
    step hybridbench sweep --task $task --split test --limit $n --routers $routers \
        --targets $TARGETS "${args[@]}" "${reuse[@]}" "${MODELS[@]}" --out "$OUT/$task"
    step hybridbench sweep --task $task --split test --limit $n --routers speculative \
        --router-arg speculative:adaptive=true "${MODELS[@]}" --out "$OUT/$task"
    # the control (random, random_query) at each share a router realized with no control run
    # within 2 points of it, so that every paired comparison in the report is at a matched
    # share; a control's own realized share differs from its p, so a few rounds
    # (scripts/matched_controls.py says how it aims)
    for round in 1 2 3; do
        [ -d "$OUT/$task" ] || break
        need=$(python scripts/matched_controls.py "$OUT/$task") || break
        [ -n "$need" ] || break
        while read -r control p; do
            extra=(); [ $control = random_query ] && extra=("${reuse[@]}")
            step hybridbench sweep --task $task --split test --limit $n --routers $control \
                --router-arg $control:p=$p "${extra[@]}" "${MODELS[@]}" --out "$OUT/$task" </dev/null
        done <<< "$need"
    done
done
# the edition against a rerun of a few of its decoded rows (must-show: `hybridbench compare`
# flags no regression): mbpp's, all 200 examples again from each row's recorded command line
# (same examples, batch size and threads, so both throughputs are comparable)
rows=random__p=0.2,entropy__target_share=0.2,confidence__target_share=0.2,speculative__default
if [ ! -f "$OUT-rerun/mbpp/compare.json" ]; then
    echo "-- $(date -u +%H:%M:%S) rerun of $rows (scripts/rerun_compare.py prints its steps)"
    python scripts/rerun_compare.py "$OUT/mbpp" --rows $rows --out "$OUT-rerun/mbpp" --lock "$LOCK"
    echo "rerun_compare exited $? (1: a flagged regression, see $OUT-rerun/mbpp/compare.json)"
fi
echo "== $(date -u +%H:%M:%S) done"
