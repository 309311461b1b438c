#!/bin/bash
# The real-model work of issues 11, 13 and 14, one after the other (each script resumable, each
# step under the heavy lock): start it once per session and it goes on where it stopped.
#
#   bash scripts/start_chain.sh                    # (installs, then runs this in the background)
#   nohup bash scripts/heavy_chain.sh >> /work/logs/heavy-chain.log 2>&1 &   # the same, by hand
#   python scripts/chain_status.py                 # what is done, what remains
#   bash scripts/stop_chain.sh                     # before the session stops: stop, stage results/
#
# Everything it writes goes under results/ (tracked, see results/README.md): a session's machine
# does not outlive it, so the chain resumes on a fresh checkout from what was committed.
# Issue 11's remaining tasks only (its other runs were measured and reported in
# docs/issue11-results.md); issue 13 trains on prompts chosen as issue 11 set them; issue 14 runs
# issue 13's routers (--collect copies in the rows measured on a GPU machine).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
command -v hybridbench >/dev/null || { echo "hybridbench is not installed here (activate its venv)"; exit 2; }
ONLY="commonsense_qa cnn_dm" OUT=results/validity bash scripts/issue11_runs.sh
OUT=results/train13 bash scripts/issue13_runs.sh
OUT=results/edition2 TRAINED=results/train13 bash scripts/issue14_runs.sh --collect
OUT=results/edition2 TRAINED=results/train13 bash scripts/issue14_runs.sh
