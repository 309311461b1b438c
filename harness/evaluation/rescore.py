"""Score a run's stored completions again with its task's current scorer (no model is loaded).

A scorer fix changes scores, never completions, so a run need not be decoded again: each
record's `scores` is recomputed from its `completion` by the task the manifest names (with its
task arguments); records that failed (an `error`) are left as they are. When any score changed,
the old records are kept beside the new ones as records.jsonl.before-rescore-<UTC time>;
summary.json is written again either way (`harness.evaluation.runner.write_summary`). Run it
while nothing decodes into the folder.

    hybridbench rescore runs/gsm8k-small runs/gsm8k-large
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
from pathlib import Path

from harness.core.records import records_path as stored_records
from harness.errors import UserError
from harness.evaluation.runner import all_lines, load_records, write_records, write_summary
from harness.metrics import quality as metrics
from tasks import get_task, task_ref


def rescore(run: Path) -> dict:
    """Rescore one run folder in place; returns {"n", "changed", "metric", "before", "after"}."""
    manifest_path, records_path = run / "manifest.json", run / "records.jsonl"
    if manifest_path.is_file() and not records_path.is_file() and stored_records(run):
        # a published run keeps its records compressed: rescore an uncompressed copy in place
        records_path.write_bytes(gzip.decompress(stored_records(run).read_bytes()))
    if not manifest_path.is_file() or not records_path.is_file():
        raise UserError(f"{run} is not a run folder (manifest.json and records.jsonl needed)")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    metric = manifest["metric"]
    task = get_task(task_ref(manifest), **manifest.get("task_args", {}))
    split = task.split(manifest["split"], seed=manifest.get("split_seed", 0))
    examples = {ex.id: ex for ex in split}
    before = metrics.quality(list(load_records(records_path).values()), metric)
    lines, changed = all_lines(records_path), 0  # failed records stay as they are
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
        shutil.copy2(records_path, run / f"records.jsonl.before-rescore-{stamp}")
        write_records(records_path, lines)
    good = list(load_records(records_path).values())  # one per example, as the runner counts
    write_summary(run, good, manifest)
    after = metrics.quality(good, metric)
    return {"n": len(good), "changed": changed, "metric": metric, "before": before, "after": after}
