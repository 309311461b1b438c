#!/bin/bash
# Stage results/ (the real-model chain's output, scripts/heavy_chain.sh) for a commit, so the
# next session's fresh checkout resumes from it. Files over MAX_MB (default 40) are left out
# and listed: a git repository is no place for them (CITER's label files hold hidden states).
#
#   bash scripts/keep_results.sh && git commit -m "results: ..."
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_MB=${MAX_MB:-40}
[ -d results ] || { echo "no results/ folder here"; exit 0; }
big=$(find results -type f -size +"${MAX_MB}"M | sort)
find results -type f -size -"$((MAX_MB + 1))"M -print0 | xargs -0 -r git add --
if [ -n "$big" ]; then
    echo "left out (over $MAX_MB MB; they do not survive this machine):"
    while read -r f; do echo "  $f ($(du -m "$f" | cut -f1) MB)"; done <<< "$big"
fi
git status --short -- results | awk '{print $1}' | sort | uniq -c | sed 's/^/staged: /'
