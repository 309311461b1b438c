"""Can a task's numbers be trusted? Per run folder: quality with its 95% CI, the share of
completions cut at the token budget, the share with no extractable answer, mean tokens.

    hybridbench validity runs/validity            # every run folder below it
    hybridbench validity runs/gsm8k-small runs/gsm8k-large --json
    hybridbench validity reports/published/*/small__default   # a leaderboard's rows

Reads only `manifest.json` and `records.jsonl` (no model, no scoring), so it also works on a run
that is still going. Columns:

- quality [95% CI]: the task's primary metric, `harness.metrics.quality.quality` / `quality_ci`
  (percentile bootstrap, 1000 resamples, seed 0); then the task's other metrics' means
  (lm-eval's strict / flexible rules where a task keeps them);
- cut: share of completions whose generation stopped at `max_new_tokens` (stop_reason
  "max_tokens"), with the budget;
- no answer: share whose score has `extracted` = 0 (tasks/*.py say what counts as an answer);
  "–" for runs recorded before the scorers had that field;
- tokens: mean emitted tokens per completion; max: the longest;
- published: the model's published score where one exists (EvalPlus base, Qwen2.5-Coder
  technical report), for comparison only: a different prompt, data version and precision.
"""

from __future__ import annotations

from pathlib import Path

from harness.core.run_folder import RunFolder, runs_below
from harness.metrics.quality import n_emitted, ok_records, quality, quality_ci

# Qwen2.5-Coder technical report (arXiv 2409.12186), instruct models, EvalPlus base tests, pass@1.
PUBLISHED = {
    ("humaneval", "qwen2.5-coder-0.5b-instruct"): 61.6,
    ("mbpp", "qwen2.5-coder-0.5b-instruct"): 52.4,
    ("humaneval", "qwen2.5-coder-1.5b-instruct"): 70.7,
    ("mbpp", "qwen2.5-coder-1.5b-instruct"): 69.2,
}
DEFAULT_MODELS = {"small": "qwen2.5-coder-0.5b-instruct", "large": "qwen2.5-coder-1.5b-instruct"}


def run_folders(paths: list[str]) -> list[Path]:
    """Every run folder at or below `paths`, sorted."""
    return runs_below(paths)


def model_of(manifest: dict) -> str:
    """The packaged model a single-model run used ("" for a hybrid router or a custom model)."""
    router = manifest.get("router")
    if router not in DEFAULT_MODELS:
        return ""
    source = manifest.get("model_sources", {}).get(router, "default")
    return DEFAULT_MODELS[router] if source == "default" else source


def run_name(folder: Path, task: str) -> str:
    """The folder's name, led by its task where the name does not say it
    (`gsm8k/small__default` for a leaderboard's `reports/published/gsm8k/small__default`)."""
    return folder.name if task in folder.name else f"{task}/{folder.name}"


def validity(folder: Path) -> dict:
    """One row of the table for the run in `folder`."""
    run = RunFolder(folder)
    manifest = run.manifest()
    records = ok_records(list(run.done().values()))
    metric, n = manifest["metric"], len(records)
    tokens = [n_emitted(r) for r in records]
    extracted = [r["scores"]["extracted"] for r in records if "extracted" in r["scores"]]
    others = sorted({k for r in records for k in r["scores"]} - {metric, "extracted"})
    lo, hi = quality_ci(records, metric)
    model = model_of(manifest)
    return {
        "run": run_name(folder, manifest["task"]),
        "task": manifest["task"],
        "router": manifest["router"],
        "n": n,
        "metric": metric,
        "quality": quality(records, metric),
        "ci": (lo, hi),
        "others": {k: sum(r["scores"].get(k, 0.0) for r in records) / n for k in others}
        if n
        else {},
        "budget": manifest["decode"]["max_new_tokens"],
        "cut": sum(r["generation"]["stop_reason"] == "max_tokens" for r in records) / n
        if n
        else None,
        "no_answer": 1 - sum(extracted) / len(extracted) if extracted and n else None,
        "tokens": sum(tokens) / n if n else None,
        "max_tokens": max(tokens, default=0),
        "published": PUBLISHED.get((manifest["task"], model)),
    }


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def markdown(rows: list[dict]) -> str:
    """The table, one line per run."""
    head = (
        "| run | n | quality [95% CI] | other metrics | cut at budget | no answer "
        "| mean tokens (max) | published |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lo, hi = r["ci"]
        others = ", ".join(f"{k} {v:.3f}" for k, v in r["others"].items()) or "–"
        published = "–" if r["published"] is None else f"{r['published'] / 100:.3f}"
        tokens = "–" if r["tokens"] is None else f"{r['tokens']:.0f} ({r['max_tokens']})"
        lines.append(
            f"| {r['run']} | {r['n']} | {r['metric']} {r['quality']:.3f} [{lo:.3f}, {hi:.3f}] "
            f"| {others} | {_pct(r['cut'])} of {r['budget']} | {_pct(r['no_answer'])} "
            f"| {tokens} | {published} |"
        )
    return "\n".join(lines)
