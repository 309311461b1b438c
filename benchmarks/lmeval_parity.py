"""Parity check: lm-eval with `--model hybrid` vs `hybridbench run`, same GSM8K examples and router.

    flock /tmp/hybridbench-heavy.lock python -m benchmarks.lmeval_parity --router small --limit 10 \\
        --threads 2 --out runs/lmeval-parity

Runs both (real default pair unless --small/--large are given) and compares them per example:

  hybridbench run --task gsm8k --split test --limit N          the project's prompt and scorer
  hybridbench lm-eval --tasks gsm8k_hybridbench --limit N      lm-eval's gsm8k config (filters,
      --apply_chat_template                                    metrics, stop strings) with the
                                                               project's prompt, on the same rows

What is compared: that lm-eval's prompts are the run's prompts token for token, that both produced
the same completion for each example, and that lm-eval's exact_match (flexible-extract; and
strict-match) equals the run's exact_match_flexible (exact_match_strict), per example and in
the mean. (The run's primary exact_match reads \\boxed{} first: lm-eval has no such filter.)
lm-eval's own gsm8k prompt ("Question: ... Answer:", 5-shot) is a different prompt: accuracies
under it are not comparable with the project's, so it is not what this checks.
Exit status 0 when everything matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FILTERS = {"flexible-extract": "exact_match_flexible", "strict-match": "exact_match_strict"}


def _cli(*argv: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    cmd = [sys.executable, "-m", "harness.cli.main", *argv]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=False, env=env, cwd=ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--router", default="small")
    ap.add_argument("--router-arg", action="append", default=[], metavar="K=V")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--small", default=None)
    ap.add_argument("--large", default=None)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", default="runs/lmeval-parity")
    a = ap.parse_args()

    out = Path(a.out)
    run_dir, lm_dir = out / "run", out / "lmeval"
    models = [f"--dtype={a.dtype}", f"--threads={a.threads}"]
    models += [f"--small={a.small}"] if a.small else []
    models += [f"--large={a.large}"] if a.large else []
    rargs = [f"--router-arg={x}" for x in a.router_arg]
    _cli("run", "--task=gsm8k", "--split=test", f"--limit={a.limit}", f"--router={a.router}",
         *rargs, f"--out={run_dir}", *models)  # fmt: skip
    margs = [f"router={a.router}", f"dtype={a.dtype}", f"threads={a.threads}", *a.router_arg]
    margs += [f"small={a.small}"] if a.small else []
    margs += [f"large={a.large}"] if a.large else []
    _cli("lm-eval", "--model", "hybrid", "--model_args", ",".join(margs),
         "--tasks", "gsm8k_hybridbench", "--apply_chat_template", f"--limit={a.limit}",
         "--output_path", str(lm_dir), "--log_samples")  # fmt: skip
    return compare(run_dir, lm_dir, a.small)


def compare(run_dir: Path, lm_dir: Path, small: str | None = None) -> int:
    from harness.metrics.quality import bootstrap_ci
    from tasks import get_task

    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    by_id = {r["example_id"]: r for r in records if not r.get("error")}
    samples_file = max(lm_dir.rglob("samples_gsm8k_hybridbench_*.jsonl"), key=os.path.getmtime)
    samples = [json.loads(x) for x in samples_file.read_text().splitlines()]
    task = get_task("gsm8k")
    examples = {ex.id: ex for ex in task.split("test")}
    from harness.backends.models import DEFAULT_SMALL, load_tokenizer

    tok = load_tokenizer(small or DEFAULT_SMALL)
    ok, rows = True, {}
    for s in samples:
        eid = f"gsm8k/test/{s['doc']['id']}"
        rec, ex = by_id.get(eid), examples[eid]
        context, text = s["arguments"]["gen_args_0"]["arg_0"], s["resps"][0][0]
        chat = tok.apply_chat_template(list(ex.messages), add_generation_prompt=True)
        same_prompt = tok(context)["input_ids"] == list(getattr(chat, "input_ids", chat))
        same_text = rec is not None and rec["completion"] == text
        run_score = rec["scores"][FILTERS[s["filter"]]] if rec else float("nan")
        row = rows.setdefault(eid, {"prompt": same_prompt, "text": same_text})
        row[s["filter"]] = (run_score, s["exact_match"])
        ok &= same_prompt and same_text and run_score == s["exact_match"]
    print(f"\n{'example':<16} prompt text  flexible(run,lm)  strict(run,lm)")
    for eid, r in rows.items():
        print(f"{eid:<16} {r['prompt']!s:<6} {r['text']!s:<5} "
              f"{r['flexible-extract']!s:<17} {r['strict-match']}")  # fmt: skip
    for f, key in FILTERS.items():
        run_vals = [r[f][0] for r in rows.values()]
        lm_vals = [r[f][1] for r in rows.values()]
        for who, vals in (("hybridbench run", run_vals), ("lm-eval hybrid ", lm_vals)):
            lo, hi = bootstrap_ci(vals)
            mean = sum(vals) / len(vals)
            print(f"{who} {key:<20} {mean:.3f}  95% CI [{lo:.3f}, {hi:.3f}]  n={len(vals)}")
    print("PARITY OK" if ok else "PARITY FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
