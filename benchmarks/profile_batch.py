"""Where a batched decode step's time goes on the real pair: every `llama_decode` of a
`generate_many` run, with its rows, tokens and context length, against the probe's one-token step.

    flock /tmp/hybridbench-heavy.lock python -m benchmarks.profile_batch --batch 16 --limit 32 \\
        --threads 2 --out runs/profile-b16.json

Runs small-only on the first `--limit` gsm8k test examples (the task's prompt, `--max-new-tokens`
cap) through the core at `--batch`, timing each `LlamaCppBackend._decode_calls` (one batched model
call: its sequences, the tokens fed, the longest context) and the Python time between calls.
Prints seconds per call grouped by tokens fed (1 token a sequence vs calls carrying a new
prompt's prefill) and by context length, next to the probe's full-batch step for the same B.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def summarize(calls: list[dict], probe: dict, batch: int, tokens: int, wall: float) -> dict:
    small = [c for c in calls if c["model"] == "small"]
    full = [c for c in small if c["sequences"] == batch and c["tokens"] == batch]
    prefill = [c for c in small if c["tokens"] > c["sequences"]]
    one_token = {}  # rows in the call -> seconds of its one-token-per-row calls
    for c in small:
        if c["tokens"] == c["sequences"]:
            one_token.setdefault(c["sequences"], []).append(c["seconds"])

    def mean(xs, key):
        return sum(x[key] for x in xs) / len(xs) if xs else float("nan")

    return {
        "tokens": tokens,
        "wall_s": wall,
        "tok_per_s": tokens / wall,
        "calls": len(small),
        "python_gap_s": sum(c["gap"] for c in small),
        "call_s": sum(c["seconds"] for c in small),
        "probe_step_s": probe,
        "full_one_token_calls": {"n": len(full), "mean_s": mean(full, "seconds")},
        "calls_with_prefill": {
            "n": len(prefill),
            "mean_s": mean(prefill, "seconds"),
            "seconds": sum(c["seconds"] for c in prefill),
            "tokens": sum(c["tokens"] for c in prefill),
        },  # fmt: skip
        "full_calls_by_context": {
            f"<{hi}": {"n": len(g), "mean_s": mean(g, "seconds")}
            for lo, hi in ((0, 256), (256, 512), (512, 1024), (1024, 4096))
            if (g := [c for c in full if lo <= c["max_context"] < hi])
        },
        "one_token_calls_by_rows": {
            b: {"n": len(t), "median_s": statistics.median(t)} for b, t in sorted(one_token.items())
        },
        "mean_sequences_per_call": mean(small, "sequences"),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--limit", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=640)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None)
    p.add_argument("--summary-of", help="print the summary of an earlier --out file, run nothing")
    args = p.parse_args(argv)
    if args.summary_of:
        old = json.loads(Path(args.summary_of).read_text())
        s = old["summary"]
        batch = max(int(b) for b in s["probe_step_s"])
        print(
            json.dumps(
                summarize(old["calls"], s["probe_step_s"], batch, s["tokens"], s["wall_s"]),
                indent=1,
            )
        )
        return 0

    from harness.backends import batch_size as batching
    from harness.backends.engine import Engine
    from harness.backends.llamacpp import LlamaCppBackend
    from harness.core.loop import DecodeConfig
    from harness.core.scheduler import Job
    from routers.baselines import SmallOnly
    from tasks import get_task

    engine = Engine.load(backend="llama.cpp", threads=args.threads, n_seq=args.batch)
    engine.batch = args.batch
    probe = batching.probe(engine, candidates=(1, args.batch))
    calls, last = [], [time.perf_counter()]
    real = LlamaCppBackend._decode_calls

    def timed(self, batch_calls, hidden, results, where):
        t0 = time.perf_counter()
        real(self, batch_calls, hidden, results, where)
        t1 = time.perf_counter()
        calls.append(
            {
                "model": self.info.name,
                "sequences": len(batch_calls),
                "tokens": sum(len(c[1]) for c in batch_calls),
                "max_context": max(c[0].length for c in batch_calls),
                "seconds": t1 - t0,
                "gap": t0 - last[0],  # Python time since the previous call ended
            }
        )
        last[0] = t1

    LlamaCppBackend._decode_calls = timed
    task = get_task("gsm8k")
    cfg = DecodeConfig(max_new_tokens=args.max_new_tokens, stop=tuple(task.stop))
    jobs = [Job(ex.id, engine.encode(ex.messages), cfg) for ex in task.split("test")[: args.limit]]
    t0 = time.perf_counter()
    n = sum(len(g.token_ids) for _, g in engine.generate_each(SmallOnly(), jobs, "profile"))
    wall = time.perf_counter() - t0
    summary = summarize(calls, probe["small"], args.batch, n, wall)
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "calls": calls}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
