"""`hybridbench demo`: the README's main job, a few routers on a few test examples of real models."""

from __future__ import annotations

import argparse

from harness.cli import options
from harness.cli import run as run_command

DEMO_TOKENS = 640  # gsm8k answers that end by themselves are nearly all shorter


def configure(p) -> None:
    p.add_argument("--task", default="gsm8k")
    p.add_argument("--routers", default="small,large,oracle", help="comma-separated router names")
    p.add_argument("--limit", type=int, default=5, help="test examples per router")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEMO_TOKENS,
        help=f"answer cap (default {DEMO_TOKENS}: on gsm8k nearly every answer that ends by "
        "itself is shorter; repetition loops reach it); 0 = the task's own budget",
    )
    p.add_argument("--out", default="runs/demo", help="results folder, one run per router")
    options.add_model_args(p)


def run(args) -> int:
    """Run each router on the first `limit` test examples (resumable) and print one table."""
    import json
    from pathlib import Path

    models = ["--dtype", args.dtype, "--threads", str(args.threads)]
    for flag in ("small", "large", "backend", "small_backend", "large_backend", "n_ctx"):
        if getattr(args, flag) is not None:
            models += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.max_new_tokens:
        models += ["--max-new-tokens", str(args.max_new_tokens)]
    rows, root, shared = [], Path(args.out) / args.task, {}
    for name in [r.strip() for r in args.routers.split(",") if r.strip()]:
        out = root / name
        argv = ["--task", args.task, "--router", name, "--limit", str(args.limit)]
        argv += ["--out", str(out), *models]
        # the oracle's answer is large's: replayed from this demo's large run (README "Reusing
        # answers"), the same records as decoding it, in seconds instead of minutes
        done = [root / r / "summary.json" for r in ("small", "large")]
        if name == "oracle" and all(f.is_file() for f in done):
            argv += ["--reuse-answers", f"{root / 'small'},{root / 'large'}"]
        _run_shared(argv, shared)
        rows.append(json.loads((out / "summary.json").read_text()))
    print(demo_table(rows))
    return 0


def _run_shared(argv: list[str], shared: dict) -> int:
    """One `hybridbench run` (its options in `argv`) with the pair loaded once for all of the
    demo's runs (`shared` keeps it). Models a router brings (the reward model) join a copy of
    that engine for its run. A UserError goes up to the command line, which prints it."""
    from harness.backends import engine as engines
    from harness.evaluation.runner import evaluate
    from routers import get_router, parse_args

    parser = argparse.ArgumentParser(prog="hybridbench run")
    run_command.configure(parser)
    args = parser.parse_args(argv)
    router = get_router(args.router, parse_args(args.router_arg))
    if "engine" not in shared:
        shared["engine"] = engines.engine_from_args(args)
    pair = shared["engine"]
    extra = router.backends(pair)  # what engine_from_args would attach (and its checks)
    engine = pair
    if extra:
        engine = engines.Engine(pair.tokenizer, {**pair.backends, **extra}, pair.batch)
        engine.batch_probe = pair.batch_probe
    return evaluate(args, engine=engine)


def demo_table(rows: list[dict]) -> str:
    """Markdown table of run summaries: quality with its 95% interval, shares, speed."""
    from harness.evaluation.runner import HEADLINE

    lines = [
        "| router | n | quality [95% CI] | large-token share | large-call share "
        "| tok/s, all streams (batch) |",
        "|---|---|---|---|---|---|",
    ]
    for s in rows:
        f = {k: "n/a" if s.get(k) is None else f"{s[k]:.3f}" for k in HEADLINE}
        lines.append(
            f"| {s['router']} | {s['n']} | {f['quality']} [{f['quality_ci_low']}, "
            f"{f['quality_ci_high']}] | {f['large_token_share']} | {f['large_call_share']} | "
            f"{f['throughput_tok_per_s']} ({s.get('batch', 1)}"
            f"{', modeled' if s.get('throughput_modeled') else ''}) |"
        )
    return "\n".join(lines)
