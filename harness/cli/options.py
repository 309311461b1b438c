"""Command-line options that several commands share (models, router, decoding), and the
`DecodeConfig` made from them. Commands import this module, never `harness.cli.main`."""

from __future__ import annotations

import argparse
import dataclasses
import os

BACKENDS = ("auto", "hf", "llama.cpp")  # harness.backends.NAMES, without importing torch


def decode_config(args: argparse.Namespace, **extra):
    """`harness.backends.engine.decode_config`, imported when called: a command that decodes
    nothing (`experiment status`, `--help`) starts without importing torch."""
    from harness.backends.engine import decode_config as make

    return make(args, **extra)


def names(text: str) -> tuple[str, ...]:
    """A comma-separated option (`--tasks gsm8k,mbpp`) as its items, blanks dropped: an
    argparse `type=` for every list-valued option."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def typed(cls, args, **values):
    """The frozen dataclass `cls` of a command's parsed options: each field from the option of
    its name, or from `values` (typed here, e.g. parsed `K=V` arguments); a field that neither
    gives keeps its default."""
    names = {f.name for f in dataclasses.fields(cls)} - values.keys()
    return cls(**{k: getattr(args, k) for k in names if hasattr(args, k)}, **values)


def add_batch_arg(p: argparse.ArgumentParser) -> None:
    """`--batch`: generations decoded together (harness.backends.batch_size); records do not depend on it."""
    p.add_argument(
        "--batch",
        default="auto",
        metavar="N|auto",
        help="generations decoded together, their model calls batched (llama.cpp, remote); "
        "auto = the size measured fastest on this machine (default; 1 for transformers on the CPU)",
    )


def add_model_args(p: argparse.ArgumentParser, n_ctx: int = 4096) -> None:
    """The options every command that loads the pair shares (`n_ctx`: the context length a
    command uses when --n-ctx is not given, as its help says)."""
    g = p.add_argument_group("models")
    g.add_argument(
        "--small", default=None, help="small model: packaged name, folder, .gguf or hub id"
    )
    g.add_argument("--large", default=None, help="large model (must share small's tokenizer)")
    g.add_argument(
        "--dtype",
        default="bfloat16",
        help="one dtype for every transformers model (default bfloat16); "
        "llama.cpp computes in its GGUF file's own types",
    )
    g.add_argument("--small-device", default="auto", help="default: cpu")
    g.add_argument("--large-device", default="auto", help="default: cuda if available, else cpu")
    g.add_argument(
        "--threads", type=int, default=os.cpu_count(), help="CPU threads (torch and llama.cpp)"
    )
    g.add_argument(
        "--backend",
        default="auto",
        choices=BACKENDS,
        help="backend for every model: llama.cpp (GGUF on CPU), hf (transformers); "
        "auto = llama.cpp for a GGUF on the CPU when llama-cpp-python is installed, else hf",
    )
    for role in ("small", "large"):
        g.add_argument(
            f"--{role}-backend",
            default=None,
            choices=BACKENDS,
            help=f"backend of {role} only (default: --backend)",
        )
    g.add_argument(
        "--n-ctx",
        type=int,
        default=None,
        help=f"llama.cpp context length (default {n_ctx} tokens)",
    )


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


def add_token_net_args(
    p: argparse.ArgumentParser, labels: dict, target: dict
) -> argparse._ArgumentGroup:
    """The options of the commands training a token router's network on a token label file
    (`train-learned`, `train-r2r`; `labels` and `target`: their own keywords for --labels and
    --target): task, output folder, features folder, split seed, and the group "network and
    training", returned so that a command adds its own to it (`fit_args` reads them)."""
    p.add_argument("--task", required=True, help="the task whose train split labelled the tokens")
    p.add_argument("--task-arg", action="append", default=[], metavar="K=V")
    p.add_argument("--out", required=True, help="folder for features, checkpoint, metrics")
    p.add_argument("--labels", **labels)
    p.add_argument("--target", **target)
    p.add_argument(
        "--features",
        default=None,
        metavar="DIR",
        help="small's features along the labels' trajectories (default OUT/features; another "
        "training on the same label file can share them)",
    )
    p.add_argument("--split-seed", type=int, default=0)
    g = p.add_argument_group("network and training")
    g.add_argument("--width", type=int, default=128)
    g.add_argument("--buckets", type=int, default=4096, help="drafted-token embedding rows")
    g.add_argument("--epochs", type=int, default=20)
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--batch-size", type=int, default=256)
    g.add_argument("--patience", type=int, default=3)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument(
        "--target-share",
        type=float,
        default=0.2,
        help="the checkpoint's default threshold defers this share of the held-out tokens",
    )
    g.add_argument("--bootstrap", type=int, default=1000, help="resamples for the AUC intervals")
    return g


FIT_ARGS = ("width", "buckets", "epochs", "lr", "batch_size", "patience", "seed")


def fit_args(args) -> dict:
    """The FitConfig fields `add_token_net_args` adds options for, from the parsed options."""
    return {k: getattr(args, k) for k in FIT_ARGS}
