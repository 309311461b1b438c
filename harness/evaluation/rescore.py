"""Score a run's stored completions again with its task's current scorer (no model is loaded).

A scorer fix changes scores, never completions, so a run need not be decoded again: each
record's `scores` is recomputed from its `completion` by the task the manifest names (with its
task arguments); records that failed (an `error`) are left as they are. When any score changed,
the old records are kept beside the new ones, named `before-rescore-<UTC time>`
(`RunFolder.keep_copy`); the summary is written again either way
(`harness.evaluation.runner.write_summary`). It holds the folder's lock: a run decoding into the
folder makes it end at once, naming that run.

    hybridbench rescore runs/gsm8k-small runs/gsm8k-large
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.core.run_folder import RunFolder
from harness.errors import UserError
from harness.evaluation.runner import write_summary
from harness.metrics import quality as metrics
from tasks import get_task, task_ref


def rescore(run: Path) -> dict:
    """Rescore one run folder in place; returns {"n", "changed", "metric", "before", "after"}."""
    folder = RunFolder(run)
    if not folder.exists() or folder.records_file() is None:
        raise UserError(f"{run} is not a run folder (a manifest and records needed)")
    with folder.lock():
        return _rescore(folder)


def _rescore(folder: RunFolder) -> dict:
    run, manifest = folder.path, folder.manifest()
    metric = manifest["metric"]
    task = get_task(task_ref(manifest), **manifest.get("task_args", {}))
    split = task.split(manifest["split"], seed=manifest.get("split_seed", 0))
    examples = {ex.id: ex for ex in split}
    before = metrics.quality(list(folder.done().values()), metric)
    lines, changed = folder.lines(), 0  # failed records stay as they are
    for r in lines:
        if r.get("error"):
            continue
        if r["example_id"] not in examples:
            raise UserError(f"{run}: {r['example_id']} is not in {manifest['split']}")
        scores = task.score(examples[r["example_id"]], r["completion"])
        changed += scores != r["scores"]
        r["scores"] = scores
    if changed:  # nothing changed: no copy of the same records, nothing rewritten
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        folder.keep_copy(f"before-rescore-{stamp}")
        folder.write_records(lines)
    good = list(folder.done().values())  # one per example, as the runner counts
    write_summary(folder, good, manifest)
    after = metrics.quality(good, metric)
    return {"n": len(good), "changed": changed, "metric": metric, "before": before, "after": after}
