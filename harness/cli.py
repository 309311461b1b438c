"""The `hybridbench` command line.

    hybridbench generate --router oracle --prompt "What is 17*23?"
    hybridbench run --task gsm8k --router random --router-arg p=0.3 --limit 5 --out runs/x
    hybridbench bench-decode --tokens 64

Each subcommand lives in a module exposing `configure(parser)` and `run(args)`; the table below
maps names to modules and is resolved when the command line is parsed. User mistakes print one
`error:` line and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from harness.errors import UserError

COMMANDS = {
    "generate": ("harness.commands", "generate", "decode one prompt and show who wrote each token"),
    "run": (
        "harness.runner",
        "run",
        "run a router on a task split, resumable, one record per example",
    ),
    "bench-decode": (
        "harness.bench",
        "bench_decode",
        "tok/s of small, large and random routing vs the cost model",
    ),
    "demo": (
        "harness.commands",
        "demo",
        "the README's main job: a few routers on a few test examples",
    ),
    "reward-data": ("harness.reward_data", "reward_data", "reward-model preference pairs"),
    "train-reward": ("harness.train_reward", "train_reward", "train the reward model"),
    "calibrate-reward": ("harness.train_reward", "calibrate_reward", "reward-score thresholds"),
    "lm-eval": (
        "harness.lmeval",
        "lm_eval",
        "lm-evaluation-harness with model `hybrid` (any router)",
    ),
    "compare": ("harness.compare", "compare", "flag quality or speed regressions between two runs"),
    "sweep": ("harness.sweep", "sweep", "run routers at each of their settings, one run each"),
    "report": ("harness.report_cmd", "report", "write the leaderboard of a results folder"),
    "train-citer": (
        "harness.train_citer",
        "train_citer",
        "label tokens and train the CITER router",
    ),
    "train-query": (
        "harness.train_query",
        "train_query",
        "train and calibrate the query-level router",
    ),
}


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The options every command that loads the pair shares."""
    g = p.add_argument_group("models")
    g.add_argument(
        "--small", default=None, help="small model: packaged name, folder, .gguf or hub id"
    )
    g.add_argument("--large", default=None, help="large model (must share small's tokenizer)")
    g.add_argument(
        "--dtype", default="bfloat16", help="one dtype for every model (default bfloat16)"
    )
    g.add_argument("--small-device", default="auto", help="default: cpu")
    g.add_argument("--large-device", default="auto", help="default: cuda if available, else cpu")
    g.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")


def add_router_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--router", required=True, help="router name (see `hybridbench routers`)")
    p.add_argument(
        "--router-arg",
        action="append",
        default=[],
        metavar="K=V",
        help="router argument, repeatable",
    )


def add_decode_args(p: argparse.ArgumentParser, max_new_tokens: int | None = 256) -> None:
    p.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)


def decode_config(args, **extra):
    """DecodeConfig from parsed args, with user-facing checks."""
    from harness.core import DecodeConfig

    if args.max_new_tokens is not None and args.max_new_tokens < 0:
        raise UserError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    if args.temperature < 0:
        raise UserError(f"--temperature must be >= 0, got {args.temperature}")
    if not 0 < args.top_p <= 1:
        raise UserError(f"--top-p must be in (0, 1], got {args.top_p}")
    kw = {"temperature": args.temperature, "top_p": args.top_p, "seed": args.seed, **extra}
    if args.max_new_tokens is not None:
        kw["max_new_tokens"] = args.max_new_tokens
    return DecodeConfig(**kw)


def load_engine(args, router=None):
    """Set threads, then load the pair named in args, plus the models `router` brings.

    A `--large` that is an http(s) URL is an OpenAI-compatible completions server (llama.cpp's
    llama-server, vLLM) serving the large model; it must use small's tokenizer, which cannot be
    checked from here.
    """
    import torch

    from harness.engine import Engine

    torch.set_num_threads(max(1, args.threads or 1))
    if (args.large or "").startswith(("http://", "https://")):
        from harness.remote import remote_engine

        engine = remote_engine(args.large, args.small, dtype=args.dtype)
    else:
        engine = Engine.load(
            args.small,
            args.large,
            dtype=args.dtype,
            small_device=args.small_device,
            large_device=args.large_device,
        )
    for role, backend in (router.backends(engine) if router else {}).items():
        engine.add(role, backend)  # models a router brings, e.g. the reward router's
    return engine


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """Every command is listed; only the one named in argv imports its module (fast start-up)."""
    parser = argparse.ArgumentParser(prog="hybridbench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("routers", help="list the registered routers")
    sub.add_parser("tasks", help="list the registered tasks")
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (module, prefix, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == chosen:
            getattr(importlib.import_module(module), f"configure_{prefix}")(p)
            p.set_defaults(_run=(module, prefix))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        if args.command == "routers":
            from routers import ROUTERS

            print("\n".join(sorted(ROUTERS)))
            return 0
        if args.command == "tasks":
            from tasks import TASKS

            print("\n".join(sorted(TASKS)))
            return 0
        module, prefix = args._run
        return getattr(importlib.import_module(module), f"run_{prefix}")(args) or 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
