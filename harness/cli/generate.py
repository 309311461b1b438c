"""`hybridbench generate`: decode one prompt and show which model wrote each token."""

from __future__ import annotations

import sys

from harness.backends.engine import engine_from_args
from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.errors import UserError

LARGE_ON, OFF = "\033[1;31m", "\033[0m"  # bold red marks large's tokens in a terminal


def configure(p) -> None:
    options.add_router_args(p)
    p.add_argument("--prompt", required=True, help="the user message")
    options.add_decode_args(p, max_new_tokens=128)
    options.add_model_args(p)


def run(args) -> int:
    from routers import get_router, parse_args

    router = get_router(args.router, parse_args(args.router_arg))
    cfg = options.decode_config(args)
    if not args.prompt.strip():
        raise UserError("--prompt is empty")
    engine = engine_from_args(ModelSpec.of(args), router)
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
