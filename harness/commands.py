"""`hybridbench generate`: decode one prompt and show which model wrote each token."""

from __future__ import annotations

import sys

from harness import cli, options
from harness.engine import engine_from_args
from harness.errors import UserError

LARGE_ON, OFF = "\033[1;31m", "\033[0m"  # bold red marks large's tokens in a terminal


def configure_generate(p) -> None:
    options.add_router_args(p)
    p.add_argument("--prompt", required=True, help="the user message")
    options.add_decode_args(p, max_new_tokens=128)
    options.add_model_args(p)


def run_generate(args) -> int:
    from routers import get_router, parse_args

    router = get_router(args.router, parse_args(args.router_arg))
    cfg = options.decode_config(args)
    if not args.prompt.strip():
        raise UserError("--prompt is empty")
    engine = engine_from_args(args, router)
    gen = engine.generate(router, engine.encode(args.prompt), cfg)
    print(marked(engine.tokenizer, gen.token_ids, gen.provenance, sys.stdout.isatty()))
    print(summary_line(gen), file=sys.stderr)
    return 0


def marked(tokenizer, ids, provenance, colour: bool) -> str:
    """The answer with large's runs of tokens coloured (terminal) or in [[...]] (pipes, files)."""
    out, run, cur = [], [], None
    for tok, who in [*zip(ids, provenance, strict=True), (None, None)]:
        if who != cur and run:
            text = tokenizer.decode(run, skip_special_tokens=True)
            if cur == 1:
                text = f"{LARGE_ON}{text}{OFF}" if colour else f"[[{text}]]"
            out.append(text)
            run = []
        cur = who
        if tok is not None:
            run.append(tok)
    return "".join(out)


def summary_line(gen) -> str:
    """Activation ratios and speed of one generation, in one line."""
    n, steps = len(gen.token_ids), gen.steps
    tok_share = sum(gen.provenance) / n if n else float("nan")
    call_share = sum(s.large_called for s in steps) / len(steps) if steps else float("nan")
    tps = n / gen.seconds if gen.seconds > 0 else float("nan")
    who = f"query route: {gen.query_route}; " if gen.query_route else ""
    return (
        f"{who}{n} tokens, large_token_share={tok_share:.3f}, large_call_share={call_share:.3f}, "
        f"{tps:.2f} tok/s ({gen.seconds:.2f} s, first token {gen.ttft:.2f} s, stop: {gen.stop_reason})"
    )


DEMO_TOKENS = 640  # gsm8k answers that end by themselves: 140 of 141 < 540 tokens (issue 11 runs)


def configure_demo(p) -> None:
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


def run_demo(args) -> int:
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
        argv = ["run", "--task", args.task, "--router", name, "--limit", str(args.limit)]
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
    """`hybridbench run argv` with the pair loaded once for all of the demo's runs (`shared`
    keeps it): loading and setting up a pair took ~35 s a run on the development VM. Models a
    router brings (the reward model) join a copy of that engine for its run. A UserError goes up
    to `cli.main`, which prints it and exits 2, as it did for each run before."""
    from harness import engine as engines
    from harness.runner import run_run
    from routers import get_router, parse_args

    args = cli.build_parser(argv).parse_args(argv)
    router = get_router(args.router, parse_args(args.router_arg))
    if "engine" not in shared:
        shared["engine"] = engines.engine_from_args(args)
    pair = shared["engine"]
    extra = router.backends(pair)  # what engine_from_args would attach (and its checks)
    engine = pair
    if extra:
        engine = engines.Engine(pair.tokenizer, {**pair.backends, **extra}, pair.batch)
        engine.batch_probe = pair.batch_probe
    return run_run(args, engine=engine)


def demo_table(rows: list[dict]) -> str:
    """Markdown table of run summaries: quality with its 95% interval, shares, speed."""
    from harness.runner import HEADLINE

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
