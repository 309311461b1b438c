"""`hybridbench bench-gpu`: the core against transformers' own generate on a GPU, random weights
of a pair's shapes (`harness.evaluation.gpu_bench`); `--tiny` runs tiny shapes on the CPU."""

from __future__ import annotations

import os
from pathlib import Path

from harness.cli import options
from harness.errors import UserError
from harness.evaluation import gpu_bench, random_pair


def configure(p) -> None:
    p.add_argument("--out", default="runs/bench-gpu.json", help="the JSON of every row")
    p.add_argument(
        "--from-json",
        default=None,
        metavar="JSON",
        help="print the tables of a run's JSON (what docs/speed.md shows); run nothing",
    )
    p.add_argument("--tiny", action="store_true", help="tiny shapes, a few tokens (runs on a CPU)")
    p.add_argument("--small-config", default=None, help="config.json (or its folder) of small")
    p.add_argument("--large-config", default=None, help="config.json (or its folder) of large")
    p.add_argument(
        "--device", default=None, help="default: cuda (--tiny: cuda if present, else cpu)"
    )
    p.add_argument("--prompt-tokens", type=int, default=None, help="default 128 (--tiny: 8)")
    p.add_argument("--new-tokens", type=int, default=None, help="default 128 (--tiny: 4)")
    p.add_argument("--seeds-tokens", type=int, default=None, help="seeds' setting (default 64)")
    p.add_argument("--batches", default=None, help="core batch sizes (default 1,16,64)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads of small")
    p.add_argument("--budget-s", type=float, default=420.0, help="start no section after this")
    p.add_argument(
        "--sections",
        type=options.names,
        default=",".join(gpu_bench.SECTIONS),
        help=f"which to run, comma-separated (default all: {','.join(gpu_bench.SECTIONS)})",
    )


def run(args) -> int:
    if args.from_json:
        return print_tables(Path(args.from_json))
    import torch

    cuda = torch.cuda.is_available()
    device = args.device or ("cuda" if cuda or not args.tiny else "cpu")
    if device.startswith("cuda") and not cuda:
        raise UserError("bench-gpu needs CUDA (torch sees no GPU); --tiny runs on the CPU")
    tiny = args.tiny

    def pick(value, default, small):
        return value if value is not None else (small if tiny else default)

    batches = args.batches or ("1,2,4" if tiny else "1,16,64")
    sections = args.sections
    unknown = sorted(set(sections) - set(gpu_bench.SECTIONS))
    if unknown or not sections:
        raise UserError(
            f"--sections: {', '.join(unknown) or 'none given'}; "
            f"choose from {', '.join(gpu_bench.SECTIONS)}"
        )
    s = gpu_bench.Settings(
        device=device,
        dtype=torch.float32 if tiny else torch.bfloat16,
        prompt_tokens=pick(args.prompt_tokens, 128, 8),
        new_tokens=pick(args.new_tokens, 128, 4),
        batches=tuple(int(b) for b in batches.split(",")),
        hf_batches=(1, 4) if tiny else (1, 64),
        seeds_batches=(1, 2) if tiny else (1, 16),
        seeds_tokens=pick(args.seeds_tokens, 64, 4),
        threads=max(1, args.threads or 1),
        budget_s=args.budget_s,
        sections=tuple(x for x in gpu_bench.SECTIONS if x in sections),
    )
    shapes, common = (
        (random_pair.TINY_SHAPES, random_pair.TINY_COMMON)
        if tiny
        else (random_pair.QWEN_CODER_SHAPES, random_pair.QWEN_COMMON)
    )
    configs = {}
    for role, given in (("small", args.small_config), ("large", args.large_config)):
        configs[role] = (
            random_pair.load_config(given)
            if given
            else random_pair.model_config(shapes[role], common)
        )
    result = gpu_bench.bench(s, configs, Path(args.out) if args.out else None)
    print("\n\n".join(filter(None, (gpu_bench.table(result), gpu_bench.details(result)))))
    return 0


def print_tables(path: Path) -> int:
    import json

    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"--from-json: cannot read {path}: {e}") from None
    print("\n\n".join(filter(None, (gpu_bench.table(result), gpu_bench.details(result)))))
    return 0
