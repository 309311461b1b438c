#!/bin/bash
# Stage results/ (the real-model chain's output, scripts/heavy_chain.sh) for a commit, so the
# next session's fresh checkout resumes from it. Files over MAX_MB (default 40) are left out
# and listed: a git repository is no place for them (results/README.md says what is made so
# that none should be). Ignored files (results/.gitignore: partial writes) are not staged.
#
#   bash scripts/keep_results.sh && git commit -m "results: ..."
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_MB=${MAX_MB:-40}
[ -d results ] || { echo "no results/ folder here"; exit 0; }
big=()
while IFS= read -r -d '' f; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -gt $((MAX_MB * 1024 * 1024)) ]; then big+=("$f"); else git add -- "$f"; fi
done < <(git ls-files -z -m -o --exclude-standard -- results)
git ls-files -z -d -- results | xargs -0 -r git rm -q --cached --
if [ ${#big[@]} -gt 0 ]; then
    echo "left out (over $MAX_MB MB; they do not survive this machine):"
    for f in "${big[@]}"; do echo "  $f ($(du -m "$f" | cut -f1) MB)"; done
fi
git status --short -- results | awk '{print $1}' | sort | uniq -c | sed 's/^/staged: /'
