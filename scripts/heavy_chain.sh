#!/bin/bash
# The real-model work of issues 11, 13 and 14, one after the other (each script resumable, each
# step under the heavy lock): start it once per session and it goes on where it stopped.
#
#   nohup bash scripts/heavy_chain.sh >> /work/logs/heavy-chain.log 2>&1 &
#
# Issue 13 trains on prompts chosen as issue 11 set them; issue 14 runs issue 13's routers
# (--collect copies in the rows measured on a GPU machine).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
command -v hybridbench >/dev/null || { echo "hybridbench is not installed here (activate its venv)"; exit 2; }
bash scripts/issue11_runs.sh
bash scripts/issue13_runs.sh
bash scripts/issue14_runs.sh --collect
bash scripts/issue14_runs.sh
