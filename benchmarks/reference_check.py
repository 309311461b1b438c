"""Reference check: the same GGUF files, prompts and budgets through llama.cpp's own chat
completion (no project core, no project backend), compared with the project's small-only and
large-only runs example by example.

    flock /tmp/hybridbench-heavy.lock python -m benchmarks.reference_check \\
        --runs runs/validity --tasks gsm8k,mbpp --limit 100 --out runs/reference --threads 2

For each task T and role R (small, large) it reads the project's run `<runs>/T-R` (manifest and
records.jsonl), takes the same examples (the run's split, first --limit), the same budget
(the manifest's max_new_tokens) and the task's stop strings, and generates each with
`Llama(gguf, n_ctx=4096, n_batch=512, flash_attn=True).create_chat_completion(messages,
temperature=0)` (greedy; the GGUF's own chat template; the cache reset before every prompt).
Its completions are scored with the task's scorer and appended to `<out>/T-R.jsonl`
(resumable: done examples are skipped). It then prints per task and role:
accuracy of the project's run and of llama.cpp direct on the shared examples, how many
completions are identical and how many scores agree, and each example where they differ with
the first token where they part: the project's token and llama.cpp's, and the gap between their
logits in llama.cpp's own forward pass over the shared prefix (unless --no-explain). A gap near 0 is a
near-tie, which batching numerics decide: llama.cpp's result for a position depends on how the
positions were batched (the project's backend prefills and decodes in its own chunks).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

N_CTX, N_BATCH = 4096, 512  # as the project's llama.cpp backend
# The backend keeps llama.cpp's default flash_attn_type AUTO, which is "enabled" on the CPU;
# `Llama` would turn it off. Same attention kernel on both sides, so what is left is batching.
FLASH_ATTN = True


def project_run(folder: Path) -> tuple[dict, dict[str, dict]]:
    """(manifest, example_id -> record) of a project run folder."""
    from harness.core.run_folder import RunFolder

    run = RunFolder(folder)
    if not run.exists():
        raise SystemExit(f"{folder}: no project run there (no manifest)")
    return run.manifest(), run.done()


def gguf_path(manifest: dict, role: str) -> Path:
    """The GGUF file the project's run used for `role` (packaged name or a .gguf path)."""
    from harness.backends import models

    source = manifest["model_sources"][role]
    if source == "default":
        source = models.DEFAULT_SMALL if role == "small" else models.DEFAULT_LARGE
    return models.gguf_file(source)[0]


def generate_direct(llm, task, examples, budget: int, path: Path) -> dict[str, dict]:
    """llama.cpp chat completion for each example not yet in `path` (JSONL, appended)."""
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash: that example runs again
            done[row["example_id"]] = row
    with path.open("a", encoding="utf-8") as f:
        for i, ex in enumerate(ex for ex in examples if ex.id not in done):
            t0 = time.perf_counter()
            llm.reset()  # prefill every prompt from scratch: no reuse of the last one's cache
            out = llm.create_chat_completion(
                messages=list(ex.messages),
                temperature=0.0,
                repeat_penalty=1.0,
                max_tokens=budget,
                stop=list(task.stop) or None,
                seed=0,
            )
            text = out["choices"][0]["message"]["content"] or ""
            row = {
                "example_id": ex.id,
                "completion": text,
                "finish_reason": out["choices"][0]["finish_reason"],  # "length" = cut
                "completion_tokens": out["usage"]["completion_tokens"],
                "prompt_tokens": out["usage"]["prompt_tokens"],
                "scores": task.score(ex, text),
                "seconds": time.perf_counter() - t0,
            }
            f.write(json.dumps(row) + "\n")
            f.flush()
            done[ex.id] = row
            print(f"  {path.stem} {i + 1}: {ex.id} {row['scores'][task.metric]:.0f}", flush=True)
    return done


def first_split(llm, ex, project_ids: list[int], direct_text: str) -> dict:
    """Where the two greedy completions part, in tokens, and llama.cpp's logit gap there."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    direct_ids = llm.tokenize(direct_text.encode(), add_bos=False, special=False)
    k = next(
        (i for i, (a, b) in enumerate(zip(project_ids, direct_ids, strict=False)) if a != b),
        min(len(project_ids), len(direct_ids)),
    )
    if k >= min(len(project_ids), len(direct_ids)):
        return {"token": k, "note": "one completion is a prefix of the other (stop or budget)"}
    formatter = Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token=llm.detokenize([llm.token_eos()]).decode(errors="replace"),
        bos_token="",
    )
    prompt = formatter(messages=list(ex.messages)).prompt
    prefix = llm.tokenize(prompt.encode(), add_bos=False, special=True) + project_ids[:k]
    llm.reset()
    llm.eval(prefix)  # without logits_all, llama.cpp keeps only the last position's logits
    row = llm._ctx.get_logits_ith(-1)
    logits = np.ctypeslib.as_array(row, shape=(llm.n_vocab(),)).copy()
    ours, theirs = project_ids[k], direct_ids[k]
    return {
        "token": k,
        "project": llm.detokenize([ours]).decode(errors="replace"),
        "direct": llm.detokenize([theirs]).decode(errors="replace"),
        "gap": float(logits[theirs] - logits[ours]),  # llama.cpp's margin for its own choice
        "direct_argmax_is_direct": int(logits.argmax()) == theirs,
    }


def compare(task, role, project: dict[str, dict], direct: dict[str, dict], llm, explain: bool):
    """Print accuracy of each, agreement, and every differing example."""
    ids = [i for i in direct if i in project]
    metric = task.metric
    if not ids:
        print(f"\n## {task.name} {role}: no example in both (run the project's runs first)")
        return {"n": 0}
    acc_p = sum(project[i]["scores"][metric] for i in ids) / len(ids)
    acc_d = sum(direct[i]["scores"][metric] for i in ids) / len(ids)
    same_text = [i for i in ids if project[i]["completion"] == direct[i]["completion"]]
    same_score = [i for i in ids if project[i]["scores"][metric] == direct[i]["scores"][metric]]
    same_prompt = [
        i for i in ids if project[i]["generation"]["n_prompt_tokens"] == direct[i]["prompt_tokens"]
    ]
    print(
        f"\n## {task.name} {role}: n={len(ids)}  {metric} project {acc_p:.3f}  "
        f"llama.cpp direct {acc_d:.3f}  identical completions {len(same_text)}/{len(ids)}  "
        f"same score {len(same_score)}/{len(ids)}  same prompt length {len(same_prompt)}/{len(ids)}"
    )
    examples = {ex.id: ex for ex in task.load()}
    for i in ids:
        if i in same_text:
            continue
        p, d = project[i], direct[i]
        line = (
            f"- {i}: project {p['scores'][metric]:.0f} ({p['generation']['stop_reason']}, "
            f"{len(p['generation']['token_ids'])} tok), direct {d['scores'][metric]:.0f} "
            f"({d['finish_reason']}, {d['completion_tokens']} tok)"
        )
        if explain:
            line += f"; parts at {first_split(llm, examples[i], p['generation']['token_ids'], d['completion'])}"
        print(line, flush=True)
    return {"n": len(ids), "acc_project": acc_p, "acc_direct": acc_d, "identical": len(same_text),
            "same_score": len(same_score), "same_prompt_length": len(same_prompt)}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="runs/validity", help="folder of <task>-<role> project runs")
    p.add_argument("--tasks", default="gsm8k,mbpp")
    p.add_argument("--roles", default="small,large")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--out", default="runs/reference")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-explain", dest="explain", action="store_false")
    args = p.parse_args(argv)

    from llama_cpp import Llama

    from tasks import get_task

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for role in args.roles.split(","):
        llm = None
        for name in args.tasks.split(","):
            manifest, project = project_run(Path(args.runs) / f"{name}-{role}")
            task = get_task(name, **manifest["task_args"])
            examples = task.split(manifest["split"], seed=manifest["split_seed"])[: args.limit]
            if llm is None:
                llm = Llama(
                    model_path=str(gguf_path(manifest, role)),
                    n_ctx=N_CTX,
                    n_batch=N_BATCH,
                    n_threads=args.threads,
                    flash_attn=FLASH_ATTN,
                    seed=0,
                    verbose=False,
                )
            budget = manifest["decode"]["max_new_tokens"]
            direct = generate_direct(llm, task, examples, budget, out / f"{name}-{role}.jsonl")
            results[f"{name}-{role}"] = compare(task, role, project, direct, llm, args.explain)
    (out / "summary.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
