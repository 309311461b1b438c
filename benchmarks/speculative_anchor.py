"""Anchor for speculative decoding: ours on the llama.cpp backend beside llama.cpp's own.

    flock /tmp/hybridbench-heavy.lock python -m benchmarks.speculative_anchor \\
        --prompts 20 --max-new-tokens 384 --threads 2 --out runs/spec-anchor

Same GGUF files, same prompt token ids (the first N gsm8k test examples with the task's boxed
prompt, chat template applied), greedy, the same budget, EOS only (no stop strings):

  server          llama-server -m LARGE                         (llama.cpp's plain decoding)
  server-md3      llama-server -m LARGE -md SMALL --spec-type draft-simple --spec-draft-n-max 3
                  (its speculative decoding; without --spec-type it loads SMALL and never drafts)
  server-md8      ... --spec-draft-n-max 8
  large           this project's core, `large` router, llama.cpp backend, one stream
  spec-k3         the core, `speculative` router, k = 3 (llama.cpp's default draft length)
  spec-adaptive   the core, `speculative` router, adaptive=true (k from the acceptance rate and
                  this machine's measured pass costs, k = 0 when speculation cannot pay)

The servers take the prompt as token ids through `POST /completion` (return_tokens), one request
at a time, prompt cache off; ours decodes one example at a time (B = 1). Every method runs on
each prompt before the next prompt starts, so load from elsewhere hits them alike. Speed is
end to end (prefill + decode, HTTP included for the servers) over the tokens each produced, EOS
not counted. Equality: each method's ids against `server` (plain greedy large), token for token;
at the first difference, large's top-2 logit margin there (from our backend) says whether it
is a near-tie. Writes OUT/results.json (its settings and one row per prompt, after each prompt)
and prints the table. Resumable: a rerun with the same settings skips the prompts already in
OUT/results.json (every method ran on each of them side by side); `--table` prints its table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.remote_check import start_server  # noqa: E402

SERVERS = {"server": None, "server-md3": 3, "server-md8": 8}
OURS = {
    "large": ("large", {}),
    "spec-k3": ("speculative", {"k": 3}),
    "spec-adaptive": ("speculative", {"adaptive": True}),
}


def server_complete(port: int, ids: list[int], n: int) -> dict:
    body = {
        "prompt": ids,
        "n_predict": n,
        "temperature": 0.0,
        "top_k": 1,
        "seed": 0,
        "cache_prompt": False,
        "return_tokens": True,
    }
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=3600) as r:
        out = json.loads(r.read())
    secs = time.perf_counter() - t0
    t = out.get("timings", {})
    return {
        "ids": list(out["tokens"]),
        "seconds": secs,
        "draft_n": t.get("draft_n"),
        "draft_accepted": t.get("draft_n_accepted"),
    }


def margin_at(large, prompt: list[int], ids: list[int], pos: int) -> float:
    """large's top-2 logit margin at the position that predicts ids[pos]."""
    large.reset()
    logits, _ = large.forward(prompt + ids[:pos], 1)
    large.reset()
    top = logits[-1].float().topk(2).values
    return float(top[0] - top[1])


def first_diff(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=384)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--server", default=str(Path.home() / ".cache/hybridbench/bin/llama-server"))
    p.add_argument("--out", default="runs/spec-anchor")
    p.add_argument("--table", action="store_true", help="print OUT's table, run nothing")
    args = p.parse_args(argv)
    out = Path(args.out)
    settings = {"max_new_tokens": args.max_new_tokens, "threads": args.threads, "n_ctx": args.n_ctx}
    rows = load_rows(out / "results.json", settings)
    if args.table:
        print(table(rows))
        return 0

    from harness.backends.engine import Engine
    from harness.backends.models import DEFAULT_LARGE, DEFAULT_SMALL, assemble_gguf
    from harness.core.loop import DecodeConfig
    from routers import get_router
    from tasks import get_task

    out.mkdir(parents=True, exist_ok=True)
    engine = Engine.load(backend="llama.cpp", threads=args.threads, n_ctx=args.n_ctx)
    small_gguf, large_gguf = str(assemble_gguf(DEFAULT_SMALL)), str(assemble_gguf(DEFAULT_LARGE))
    done = {r["id"] for r in rows}
    examples = [ex for ex in get_task("gsm8k").split("test")[: args.prompts] if ex.id not in done]
    if not examples:
        print(table(rows))
        return 0
    eos = engine.eos_ids
    cfg = DecodeConfig(max_new_tokens=args.max_new_tokens, eos_ids=eos)

    routers = {name: get_router(r, kw) for name, (r, kw) in OURS.items()}
    for router in routers.values():
        router.backends(engine)  # the adaptive schedule's pass costs, measured once
    servers = {}
    try:
        for name, draft in SERVERS.items():
            # --spec-type draft-simple: with -md alone this llama-server loads the draft model
            # and never drafts (its default spec type is "none")
            extra = ["-md", small_gguf, "--spec-type", "draft-simple"] if draft else []
            extra += ["--spec-draft-n-max", str(draft)] if draft else []
            log = out / f"{name}.log"
            servers[name] = start_server(
                args.server, large_gguf, args.threads, log, extra, args.n_ctx
            )
        for n, ex in enumerate(examples, start=len(rows)):
            ids = engine.encode(ex.messages)
            row = {"id": ex.id, "prompt_tokens": len(ids)}
            for name, (_, port) in servers.items():
                r = server_complete(port, ids, args.max_new_tokens)
                r["ids"] = [t for t in r["ids"] if t not in eos]
                if SERVERS[name] and not r["draft_n"]:
                    raise SystemExit(f"{name} drafted no tokens: it did not speculate")
                row[name] = r
            for name, router in routers.items():
                g = engine.generate(router, ids, cfg)
                row[name] = {"ids": [t for t in g.token_ids if t not in eos], "seconds": g.seconds}
            ref = row["server"]["ids"]
            for name in list(SERVERS)[1:] + list(OURS):
                d = first_diff(ref, row[name]["ids"])
                row[name]["equal"] = d is None
                if d is not None:
                    row[name]["first_diff"] = d
                    row[name]["margin"] = margin_at(engine.backends["large"], ids, ref, d)
            rows.append(row)
            tmp = out / "results.json.tmp"
            costs = routers["spec-adaptive"].costs
            tmp.write_text(
                json.dumps({"settings": settings, "pass_costs": costs, "rows": rows}, indent=1)
            )
            tmp.replace(out / "results.json")
            print(
                f"[{n + 1}/{args.prompts}] {ex.id}: "
                + ", ".join(
                    f"{m} {len(row[m]['ids']) / row[m]['seconds']:.1f} tok/s"
                    + ("" if row[m].get("equal", True) else " (differs)")
                    for m in row
                    if m not in ("id", "prompt_tokens")
                ),
                flush=True,
            )
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    print(table(rows))
    return 0


def load_rows(path: Path, settings: dict) -> list[dict]:
    """The rows of an earlier run into the same folder; refuses one with other settings."""
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    if isinstance(old, list) or old.get("settings") != settings:
        had = "none recorded" if isinstance(old, list) else old.get("settings")
        raise SystemExit(
            f"{path} was written with other settings ({had}, now {settings}): use another --out"
        )
    return old["rows"]


def table(rows: list[dict]) -> str:
    if not rows:
        return "no prompts measured yet"

    names = list(SERVERS) + list(OURS)
    tok = {m: sum(len(r[m]["ids"]) for r in rows) for m in names}
    sec = {m: sum(r[m]["seconds"] for r in rows) for m in names}
    tps = {m: tok[m] / sec[m] for m in names}

    def median_ratio(m: str, ref: str) -> float:  # per prompt, robust to one slow prompt
        return statistics.median(
            (len(r[m]["ids"]) / r[m]["seconds"]) / (len(r[ref]["ids"]) / r[ref]["seconds"])
            for r in rows
        )

    lines = [
        f"n = {len(rows)} prompts; tok/s end to end (prefill included), EOS not counted; "
        "x = total tok/s ratio, median x = median of the per-prompt ratios",
        "| method | tokens | seconds | tok/s | x server | median x server | x server-md3 "
        "| median x large (ours) | equal to server |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in names:
        eq = sum(r[m].get("equal", True) for r in rows)
        lines.append(
            f"| {m} | {tok[m]} | {sec[m]:.1f} | {tps[m]:.2f} | "
            f"{tps[m] / tps['server']:.3f} | {median_ratio(m, 'server'):.3f} | "
            f"{tps[m] / tps['server-md3']:.3f} | {median_ratio(m, 'large'):.3f} | "
            f"{eq}/{len(rows)} |"
        )
    diffs = [
        (r["id"], m, r[m]["first_diff"], r[m]["margin"])
        for r in rows
        for m in names
        if "first_diff" in r[m]
    ]
    for ex_id, m, d, margin in diffs:
        lines.append(
            f"- {ex_id} {m}: first difference at token {d}, large's top-2 margin {margin:.3f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
