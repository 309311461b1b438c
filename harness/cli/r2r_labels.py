"""`hybridbench r2r-labels`: R2R's critical-divergence token labels on a task's train split
(harness/training/critical.py): along large's greedy answers, large continues from small's token
at each divergence (a seeded few per example) and the task's scorer says whether the outcome
changed. Resumable per example; what it cost goes to OUT/cost.jsonl."""

from __future__ import annotations

from harness.backends.engine import engine_from_args
from harness.backends.model_spec import ModelSpec
from harness.cli import options
from harness.errors import UserError
from harness.training import critical
from harness.training.common import nothing_to_do
from routers import parse_args
from tasks import get_task


def configure(p) -> None:
    p.add_argument("--task", required=True, help="the task whose train split is labelled")
    p.add_argument("--task-arg", action="append", default=[], metavar="K=V")
    p.add_argument("--out", required=True, help="folder: rollouts.jsonl, labels, stats.json")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument(
        "--examples", type=int, default=0, help="train examples, a seeded choice (0: all)"
    )
    p.add_argument(
        "--positions",
        type=int,
        default=4,
        help="divergences rolled out per example, a seeded choice (0: all)",
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=0, help="large's answer budget (0: the task's)"
    )
    p.add_argument("--seed", type=int, default=0, help="seeds the choice of examples, positions")
    options.add_model_args(p)
    options.add_batch_arg(p)


def run(args) -> int:
    if args.examples < 0 or args.positions < 0 or args.max_new_tokens < 0:
        raise UserError("--examples, --positions and --max-new-tokens must be >= 0")
    cfg = critical.CriticalConfig(
        examples=args.examples,
        positions=args.positions,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    task = get_task(args.task, **parse_args(args.task_arg))
    train = task.split("train", seed=args.split_seed)
    if len(train) < 3:
        raise UserError(f"{task.name} has {len(train)} train examples; need 3 at least")
    examples = critical.pick_examples(train, cfg.examples, cfg.seed)
    head = critical.header(task.name, cfg, args.split_seed)
    if critical.finished(args.out, head, [ex.id for ex in examples]):
        nothing_to_do()
        print(f"labels: {args.out}/{critical.LABELS} (done)")
        return 0
    engine = engine_from_args(ModelSpec.of(args))
    data = critical.build_critical(
        engine, task, examples, cfg, args.out, split_seed=args.split_seed
    )
    s = critical.stats(data)
    print(
        f"{s['divergences']} divergences in {s['tokens']} tokens of {s['examples']} examples; "
        f"{s['rolled_out']} rolled out, {s['critical']} critical ({s['critical_share']:.1%})"
    )
    print(f"labels: {args.out}/{critical.LABELS}")
    return 0
