"""`hybridbench bench-decode`: decode speed of the routers side by side, against the cost model."""

from __future__ import annotations

from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.evaluation import bench


def configure(p) -> None:
    p.add_argument("--prompts", type=int, default=3, help="gsm8k test prompts to decode")
    p.add_argument("--tokens", type=int, default=64, help="tokens per prompt (EOS ignored)")
    p.add_argument("--rates", default="0.1,0.3,0.5", help="random router defer probabilities")
    p.add_argument("--out", default=None, help="also write the measurements as JSON here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reward", default=None, help="reward checkpoint: adds a reward row")
    p.add_argument(
        "--reward-calibration", default=None, help="its calibration file (target share 0.2)"
    )
    p.add_argument("--citer", default=None, help="CITER checkpoint: adds a citer row")
    p.add_argument(
        "--backends",
        type=options.names,
        default=None,
        help="e.g. hf,llama.cpp: one table each, in this process",
    )
    options.add_model_args(p)


def run(args) -> int:
    spec = options.typed(
        bench.BenchSpec,
        args,
        rates=tuple(float(r) for r in args.rates.split(",")),
        backends=args.backends or (),
        models=ModelSpec.of(args),
    )
    return bench.bench_decode(spec)
