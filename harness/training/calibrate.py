"""`hybridbench calibrate`: a token router's scores along small's own answers on the calib split,
so that `target_share=S calibration=FILE` sets the threshold deferring that share
(routers/calibration.py says which tail each router defers).

    hybridbench calibrate --router entropy --task gsm8k --limit 138 --out runs/cal/entropy.json
    hybridbench calibrate --router reward --checkpoint reward.pt --task gsm8k --out cal.json
    hybridbench calibrate --router citer --checkpoint citer.pt --task gsm8k --out cal.json
    hybridbench run --task gsm8k --router entropy --router-arg target_share=0.2 \\
        --router-arg calibration=runs/cal/entropy.json --out runs/entropy-20

Small answers the first `--limit` examples of the split greedily (the core, batched), or the
answers are read from a small-only run over that split (`--records`); then the router's score of
every answer token comes from one pass over prompt + answer: small's entropy (nats) or top-token
probability from small's logits there, the reward model's score (the backbone the reward
router will run beside this small model), or CITER's P(small suffices) from small's hidden state
there (a CITER checkpoint also keeps the scores it was calibrated on in training, along the calib
*reference* answers in reference mode: text small did not write, on which its scores differ;
this file puts it on the footing of the others). `calibrate-reward` is `calibrate --router reward`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

from harness.backends.engine import decode_config, engine_from_args
from harness.errors import UserError

SCORED = ("entropy", "confidence", "reward", "citer")
CHECKPOINTED = ("reward", "citer")  # routers whose scores come from a trained checkpoint
PAPER_THRESHOLDS = (1.0, 1.5, 2.0, 4.0)  # the seed paper's reward thresholds
TARGET_SHARES = tuple(round(0.1 * i, 1) for i in range(1, 10))


def backend_scores(backend, prompt_ids: list[int], ids: list[int]) -> list[float]:
    """The reward of each token of `ids` after `prompt_ids` from a reward backend (one pass)."""
    if not ids:
        return []
    backend.reset()
    out, _ = backend.forward(list(prompt_ids) + list(ids), len(ids))
    backend.reset()
    return out[:, 0].tolist()


@torch.inference_mode()
def logit_scores(small, prompt_ids: list[int], ids: list[int], router: str) -> list[float]:
    """Small's entropy or top probability at each token of `ids` (from the logits that chose
    it), teacher-forced over prompt + ids: what the router reads when small writes `ids`."""
    from harness.core.forcing import FORCED_CHUNK, forced_passes
    from routers.baselines import entropy, top_probability

    fn = entropy if router == "entropy" else top_probability
    chunk = FORCED_CHUNK  # rows of logits held at once
    passes = forced_passes(small, list(prompt_ids), list(ids), chunk) if ids else ()
    return [x for logits, _ in passes for x in fn(logits).tolist()]


@torch.inference_mode()
def hidden_scores(small, router, prompt_ids: list[int], ids: list[int]) -> list[float]:
    """CITER's P(small suffices) at each token of `ids`, from small's hidden state there,
    teacher-forced over prompt + ids: what `router` reads when small writes `ids`."""
    from harness.core.forcing import FORCED_CHUNK, forced_passes

    passes = forced_passes(small, list(prompt_ids), list(ids), FORCED_CHUNK, hidden=True)
    return [x for _, hidden in (passes if ids else ()) for x in router.scores(hidden).tolist()]


def share_below(scores, threshold: float) -> float:
    """Share of `scores` strictly below `threshold` (what the router would defer); NaN if none."""
    return sum(s < threshold for s in scores) / len(scores) if len(scores) else math.nan


def small_answers(engine, examples, cfg, records: str | None) -> dict:
    """example id -> (prompt ids, small's answer ids): read from `records`, else decoded."""
    from harness.core.scheduler import Job
    from routers.baselines import SmallOnly

    if records:
        from harness.evaluation.runner import load_records

        recs = load_records(Path(records))
        missing = [ex.id for ex in examples if ex.id not in recs]
        if missing:
            raise UserError(f"{records} lacks {len(missing)} of the examples, e.g. {missing[0]}")
        return {
            ex.id: (engine.encode(ex.messages), recs[ex.id]["generation"]["token_ids"])
            for ex in examples
        }
    jobs = [Job(ex.id, engine.encode(ex.messages), cfg) for ex in examples]
    return {
        job.key: (job.prompt_ids, list(gen.token_ids))
        for job, gen in engine.generate_each(SmallOnly(), jobs, "small's calib answers")
    }


def calibrate(args) -> int:
    """Score small's own calib answers with the router named in args and write the calibration file."""
    from routers.calibration import threshold_for
    from tasks import get_task

    task = get_task(args.task)
    examples = task.split(args.split, seed=args.split_seed)[: args.limit]
    if not examples:
        raise UserError(f"task {args.task} split {args.split} has no examples")
    cfg = decode_config(args, stop=tuple(task.stop))
    if args.max_new_tokens is None:
        cfg = cfg.__class__(**{**cfg.__dict__, "max_new_tokens": task.max_new_tokens})
    if args.router in CHECKPOINTED and not args.checkpoint:
        raise UserError(f"calibrate --router {args.router} needs --checkpoint")
    engine = engine_from_args(args)
    answers = small_answers(engine, examples, cfg, args.records)
    extra = {}
    if args.router in CHECKPOINTED:
        from harness.files import file_sha256

        extra = {
            "checkpoint": str(args.checkpoint),
            "checkpoint_sha256": file_sha256(args.checkpoint),
        }
    if args.router == "reward":
        from harness.backends.reward_model import reward_backend_for

        # the backbone the reward router will run beside this small model (routers.reward)
        scorer = reward_backend_for(args.checkpoint, engine)
        score = lambda prompt, ids: backend_scores(scorer, prompt, ids)  # noqa: E731
        extra["reward_backend"] = scorer.info.backend or "transformers"
    elif args.router == "citer":
        from routers.citer import Citer

        citer = Citer(args.checkpoint)
        citer.backends(engine)  # refuses hidden states from another backend than it trained on
        small = engine.backends["small"]
        score = lambda prompt, ids: hidden_scores(small, citer, prompt, ids)  # noqa: E731
    else:
        small = engine.backends["small"]
        score = lambda prompt, ids: logit_scores(small, prompt, ids, args.router)  # noqa: E731
    from tqdm import tqdm

    scores = []
    for ex in tqdm(examples, desc=f"{args.router} scores", unit="example", file=sys.stderr):
        scores += score(*answers[ex.id])  # in example order
    cal = {
        "router": args.router,
        **extra,
        "task": task.name,
        "split": args.split,
        "split_seed": args.split_seed,
        "example_ids": [ex.id for ex in examples],
        "decode": {k: v for k, v in cfg.__dict__.items() if k != "eos_ids"},
        "answers_from": args.records or "decoded here",
        "n_tokens": len(scores),
        "thresholds": {str(s): threshold_for(args.router, scores, s) for s in TARGET_SHARES},
        "scores": scores,
    }
    if args.router == "reward":
        cal["paper_threshold_shares"] = {str(t): share_below(scores, t) for t in PAPER_THRESHOLDS}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(cal, indent=1) + "\n")
    print(f"{args.out}: {len(scores)} token scores from {len(examples)} {args.split} examples")
    print(
        "  target share -> threshold: "
        + ", ".join(f"{s}: {t:.3f}" for s, t in cal["thresholds"].items())
    )
    if "paper_threshold_shares" in cal:
        print(
            "  paper threshold -> share of calib tokens below it: "
            + ", ".join(f"{t}: {s:.3f}" for t, s in cal["paper_threshold_shares"].items())
        )
    return 0
