"""`hybridbench run`: one router on one task split, crash-safe and resumable.

    hybridbench run --task gsm8k --router entropy --router-arg target_share=0.2 \\
        --router-arg calibration=CAL.json --limit 50 --out runs/gsm8k-entropy

The run folder (`--out`) is created, or resumed when it holds the same run.
"""

from __future__ import annotations

from harness.cli import options
from harness.evaluation import runner
from harness.evaluation.spec import RunSpec


def configure(p) -> None:
    p.add_argument("--task", required=True, help="task name (see `hybridbench tasks`)")
    p.add_argument("--task-arg", action="append", default=[], metavar="K=V", help="task argument")
    options.add_router_args(p)
    p.add_argument("--split", default="test", help="train | calib | test | all (default test)")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="first N examples of the split")
    p.add_argument("--out", required=True, help="run folder (created; resumed if it exists)")
    options.add_decode_args(p, max_new_tokens=None)
    options.add_model_args(p)
    options.add_batch_arg(p)
    p.add_argument(
        "--reuse-answers",
        default=None,
        metavar="SMALL_RUN,LARGE_RUN",
        help="query routers and the oracle, greedy: take each prompt's answer from these "
        "small-only and large-only run folders (same task, split, decoding and models) instead "
        "of decoding it again; only the routing prefill (the oracle: one teacher-forced small "
        "pass) runs. Throughput is then modeled (README)",
    )


def run(args) -> int:
    summary = runner.evaluate(RunSpec.from_args(args))
    return 0 if summary.n_failed == 0 else 1
