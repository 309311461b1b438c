"""Synthetic result folders in the runner's file format, for tests and for trying the report.

No model runs: each run's records are drawn from a seeded toy model of a router (a large-token
share, a quality that rises with it, step and forward-pass records shaped like the decoding
core's). Built with `harness.core.records`, so the files have exactly the runner's format.

    python -m reports.demo /tmp/demo_results && python -m reports /tmp/demo_results
"""

from __future__ import annotations

import random
import sys
from dataclasses import asdict
from pathlib import Path

from harness.core.records import ExampleRecord, ForwardRecord, Generation, ModelInfo, StepRecord
from harness.core.run_folder import RunFolder
from harness.metrics.quality import summarize

MODELS = {
    # Qwen2.5-Coder-like sizes in bf16; KV = 2 (K,V) x layers x kv_heads x head_dim x 2 bytes.
    "small": ModelInfo("small", "demo-0.5b", "cpu", "bfloat16", 494_000_000, 988_000_000, 12_288),
    "large": ModelInfo(
        "large", "demo-1.5b", "cpu", "bfloat16", 1_540_000_000, 3_080_000_000, 28_672
    ),
    "reward": ModelInfo("reward", "demo-rm", "cpu", "bfloat16", 494_000_000, 988_000_000, 12_288),
}
Q_SMALL, Q_LARGE = 0.45, 0.80
SMALL_S, LARGE_S = 0.03, 0.09  # seconds per forward pass of each model in the toy


def _token_steps(rng, router, p_large, n_prompt, n_tokens):
    """Per-token routing: small drafts one token a step; with probability p_large large replaces it."""
    prov, steps, fw = [], [], []
    if router != "large":
        fw.append(ForwardRecord("small", "prefill", n_prompt, 0, SMALL_S))
    if router != "small":
        fw.append(ForwardRecord("large", "prefill", n_prompt, 0, LARGE_S))
    large_seen = n_prompt  # tokens in large's cache
    for t in range(n_tokens):
        ctx = n_prompt + t
        from_large = router == "large" or (router != "small" and rng.random() < p_large)
        drafted = int(router != "large")
        if drafted:
            fw.append(ForwardRecord("small", "draft", 1, ctx - 1, SMALL_S))
        if router == "reward":
            fw.append(ForwardRecord("reward", "score", 1, ctx - 1, SMALL_S / 2))
        if from_large:  # large reads the tokens it has not seen (at least its last one) at once
            n_new = max(ctx - large_seen, 1)
            fw.append(ForwardRecord("large", "catch_up", n_new, ctx - n_new, LARGE_S))
            large_seen = ctx
        prov.append(int(from_large))
        steps.append(
            StepRecord(
                drafted,
                int(drafted and not from_large),
                int(from_large),
                from_large,
                SMALL_S * drafted + LARGE_S * from_large,
            )
        )
    return prov, steps, fw


def _speculative_steps(rng, draft_len, accept, n_prompt, n_tokens):
    """Speculative decoding: small drafts draft_len tokens, large verifies them in one pass and
    emits one token after the accepted prefix (each draft accepted with probability `accept`)."""
    prov, steps = [], []
    fw = [
        ForwardRecord("small", "prefill", n_prompt, 0, SMALL_S),
        ForwardRecord("large", "prefill", n_prompt, 0, LARGE_S),
    ]
    while len(prov) < n_tokens:
        ctx = n_prompt + len(prov)
        fw += [ForwardRecord("small", "draft", 1, ctx + j, SMALL_S) for j in range(draft_len)]
        fw.append(ForwardRecord("large", "verify", draft_len, ctx, LARGE_S))
        kept = 0
        while kept < draft_len and rng.random() < accept:
            kept += 1
        kept = min(kept, n_tokens - len(prov) - 1)
        prov += [0] * kept + [1]
        steps.append(StepRecord(draft_len, kept, 1, True, SMALL_S * draft_len + LARGE_S))
    return prov, steps, fw


def _example(rng: random.Random, router: str, p: float, skill: float, i: int) -> dict:
    """One toy example; correct with a probability that rises with its large-token share."""
    n_prompt, n_tokens = 20 + rng.randrange(10), 8 + rng.randrange(16)
    if router == "speculative":
        prov, steps, fw = _speculative_steps(rng, 4, p, n_prompt, n_tokens)
    else:
        prov, steps, fw = _token_steps(rng, router, p, n_prompt, n_tokens)
    # `skill` bends the curve: 1 linear, < 1 a router that sends the right tokens, 0 lossless.
    share = sum(prov) / n_tokens
    correct = rng.random() < Q_SMALL + (Q_LARGE - Q_SMALL) * share**skill
    prefill_s = sum(f.seconds for f in fw if f.phase == "prefill")
    gen = Generation(
        prompt_ids=tuple(range(n_prompt)),
        token_ids=tuple(range(n_tokens)),
        text=f"answer {i}",
        provenance=tuple(prov),
        stop_reason="eos",
        steps=tuple(steps),
        forwards=tuple(fw),
        seconds=prefill_s + sum(s.seconds for s in steps),
        ttft=prefill_s + steps[0].seconds,
    )
    return ExampleRecord(
        f"ex{i}", "test", gen.text, {"exact_match": float(correct)}, gen.to_json(), gen.seconds
    ).to_json()


RUNS = (  # (router, router_args, large-token probability or acceptance rate, skill)
    ("small", {}, 0.0, 1.0),
    ("large", {}, 1.0, 1.0),
    ("speculative", {"draft_len": 4}, 0.8, 0.0),
    *(("reward", {"threshold": t}, p, 0.5) for t, p in ((1.0, 0.2), (2.0, 0.45), (4.0, 0.7))),
    *(("random", {"rate": r}, r, 1.0) for r in (0.25, 0.5, 0.75)),
)


def write_demo_results(results_dir: str | Path, n_examples: int = 40, seed: int = 0) -> Path:
    """Write one run folder per entry of RUNS under `results_dir`; return it.

    The last reward run gets no summary (readers must recompute it) and the first random
    run one failed record.
    """
    root = Path(results_dir)
    for k, (router, args, p_large, skill) in enumerate(RUNS):
        rng = random.Random(seed * 1000 + k)
        name = router + "".join(f"_{key}{value:g}" for key, value in args.items())
        run = root / name
        run.mkdir(parents=True, exist_ok=True)
        records = [_example(rng, router, p_large, skill, i) for i in range(n_examples)]
        if router == "random" and args["rate"] == 0.25:
            records.append(
                {**records[-1], "example_id": "failed", "generation": {}, "error": "boom"}
            )
        manifest = {
            "task": "demo-arith",
            "metric": "exact_match",
            "split": "test",
            "router": router,
            "router_args": args,
            "seed": seed,
            "temperature": 0.0,
            "top_p": 1.0,
            "max_new_tokens": 32,
            "limit": n_examples,
            "models": {role: asdict(info) for role, info in MODELS.items()},
            "versions": {"hybridbench": "demo"},
            "git_commit": "0" * 40,
            "machine": {"cpu": "demo"},
            "started": f"2025-01-01T00:00:{k:02d}Z",
        }
        folder = RunFolder(run)
        folder.write_manifest(manifest)
        folder.write_records(records)
        if not (router == "reward" and args["threshold"] == 4.0):
            folder.write_summary(summarize(records, manifest))
    return root


if __name__ == "__main__":
    print(write_demo_results(sys.argv[1] if len(sys.argv) > 1 else "demo_results"))
