"""`hybridbench calibrate`: a score router's scores along small's own answers on the calib split,
so that `target_share=S calibration=FILE` sets the threshold deferring that share
(routers/calibration.py says which tail a router defers). Any score router
(`routers.score.ScoreRouter`: entropy, confidence, reward, citer, a plugin's) calibrates the same way.

    hybridbench calibrate --router entropy --task gsm8k --limit 138 --out runs/cal/entropy.json
    hybridbench calibrate --router reward --checkpoint reward.pt --task gsm8k --out cal.json
    hybridbench calibrate --router mypkg.routers:MyRouter --router-arg k=2 --task gsm8k --out c.json
    hybridbench run --task gsm8k --router entropy --router-arg target_share=0.2 \\
        --router-arg calibration=runs/cal/entropy.json --out runs/entropy-20

Small answers the first `--limit` examples of the split greedily (the core, batched), or the
answers are read from a small-only run over that split (`--records`); then every answer is read
back by teacher forcing (`token_scores`): small over prompt + answer in chunks, and the models the
router's `needs()` asks for (small's hidden states, the reward model it brings, large's logits),
each chunk shown to the router as the `StepView` of a step that drafted those tokens, so the
scores on file are the ones it reads while small writes. (A CITER checkpoint also keeps the
scores it was calibrated on in training, along the calib *reference* answers in reference mode:
text small did not write, on which its scores differ; this file puts it on the footing of the
others.) `--checkpoint` fills the router's checkpoint argument (its class's `checkpoint_arg`:
reward's `checkpoint`, citer's `path`). `calibrate-reward` is `calibrate --router reward`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

from harness.backends.engine import decode_config, engine_from_args
from harness.core.forcing import FORCED_CHUNK, forced_passes
from harness.core.registry import BUILT_IN
from harness.core.router import StepView
from harness.errors import UserError
from harness.evaluation.spec import RunSpec
from routers import build, router_class, router_entry
from routers.calibration import class_path, threshold_for
from routers.guard import Guarded
from routers.score import ScoreRouter

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
def token_scores(engine, router, prompt_ids: list[int], ids: list[int]) -> list[float]:
    """`router.token_scores` at each token of `ids` written after `prompt_ids`, teacher-forced:
    what the router reads when small writes `ids` (see the module docstring)."""
    if not ids:
        return []
    scores = []
    for view in forced_views(engine, router.needs(), list(prompt_ids), list(ids)):
        scores += router.checked_scores(view).tolist()
    return scores


def forced_views(engine, needs, prompt: list[int], ids: list[int]) -> Iterator[StepView]:
    """StepViews along `ids`, FORCED_CHUNK drafted tokens each: small's logits (and hidden states)
    that chose them, and the reward scores and large's logits `needs` asks for."""
    reward = backend_scores(engine.backends["reward"], prompt, ids) if needs.reward else None
    large = _large_rows(engine.backends["large"], prompt, ids) if needs.large_logits else None
    small = engine.backends["small"]
    at = 0
    for logits, hidden in forced_passes(small, prompt, ids, FORCED_CHUNK, needs.small_hidden):
        k = len(logits)
        yield StepView(
            n_generated=at,
            draft=torch.as_tensor(ids[at : at + k]),
            small_logits=logits.float(),
            small_hidden=hidden,
            large_logits=large(k) if large is not None else None,
            reward=torch.as_tensor(reward[at : at + k]) if reward is not None else None,
            temperature=0.0,
            top_p=1.0,
            generator=torch.Generator().manual_seed(0),
        )
        at += k


def _large_rows(large, prompt: list[int], ids: list[int]):
    """A function k -> large's logits at the next k drafted positions and the one after them,
    [k + 1, V], as the core's verify pass gives them, taken along `ids` chunk after chunk."""
    # one row more than small's: the row after a chunk's last token opens the next chunk
    passes = (logits.float() for logits, _ in forced_passes(large, prompt, ids + ids[-1:]))
    held = [next(passes)]

    def take(k: int) -> torch.Tensor:
        while len(held[0]) < k + 1:
            held[0] = torch.cat([held[0], next(passes)])
        rows, held[0] = held[0][: k + 1], held[0][k:]
        return rows

    return take


def small_answers(engine, examples, cfg, records: str | None) -> dict:
    """example id -> (prompt ids, small's answer ids): read from `records`, else decoded."""
    from harness.core.scheduler import Job
    from routers.baselines import SmallOnly

    if records:
        from harness.core.run_folder import records_in

        recs = records_in(records)
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


def calibrate(
    spec: RunSpec, records: str | None = None, engine=None, checkpoint: str | None = None
) -> int:
    """Score small's own answers on `spec`'s split with the score router it names and write the
    calibration file to `spec.out`. `records`: small-only records over the split (answers
    reused); `engine`: an already loaded pair (`hybridbench submit`), else the spec's is loaded;
    `checkpoint`: the router's trained scorer (its `checkpoint_arg`)."""
    from tasks import get_task

    cls = router_class(spec.router)
    if not issubclass(cls, ScoreRouter):
        raise UserError(
            f"router {spec.router} is not a score router (routers.score.ScoreRouter): it has no "
            "score per token to calibrate"
        )
    router_args = dict(spec.router_args)
    if checkpoint:
        if not cls.checkpoint_arg:
            raise UserError(f"router {spec.router} takes no checkpoint")
        router_args[cls.checkpoint_arg] = str(checkpoint)
    if cls.checkpoint_arg and not router_args.get(cls.checkpoint_arg):
        raise UserError(f"calibrate --router {spec.router} needs --checkpoint")
    entry = router_entry(spec.router)
    router = build(cls, spec.router, router_args, factory=cls.for_calibration, plugin=True)
    if entry.origin != BUILT_IN:  # a plugin's faults are one error line (routers.guard)
        router = Guarded(router, spec.router)
    task = get_task(spec.task, **spec.task_args)
    examples = task.split(spec.split, seed=spec.split_seed)[: spec.limit]
    if not examples:
        raise UserError(f"task {spec.task} split {spec.split} has no examples")
    cfg = decode_config(spec, stop=tuple(task.stop))
    if spec.max_new_tokens is None:
        cfg = cfg.__class__(**{**cfg.__dict__, "max_new_tokens": task.max_new_tokens})
    engine = engine if engine is not None else engine_from_args(spec)
    for role, backend in router.backends(engine).items():  # e.g. the reward model
        engine.add(role, backend)
    answers = small_answers(engine, examples, cfg, records)
    from tqdm import tqdm

    scores = []
    for ex in tqdm(examples, desc=f"{spec.router} scores", unit="example", file=sys.stderr):
        scores += token_scores(engine, router, *answers[ex.id])  # in example order
    if not scores:
        raise UserError(f"small's answers to these {len(examples)} examples have no tokens")
    extra = {}
    if cls.checkpoint_arg:
        from harness.files import file_sha256

        path = router_args[cls.checkpoint_arg]
        extra = {"checkpoint": path, "checkpoint_sha256": file_sha256(path)}
    cal = {
        "router": cls.name,
        "router_class": class_path(cls),
        "router_args": router_args,
        "router_version": entry.version,
        **extra,
        **router.calibration_notes(engine, scores),
        "task": task.name,
        "split": spec.split,
        "split_seed": spec.split_seed,
        "example_ids": [ex.id for ex in examples],
        "decode": {k: v for k, v in cfg.__dict__.items() if k != "eos_ids"},
        "answers_from": records or "decoded here",
        "n_tokens": len(scores),
        "thresholds": {str(s): threshold_for(cls, scores, s) for s in TARGET_SHARES},
        "scores": scores,
    }
    Path(spec.out).parent.mkdir(parents=True, exist_ok=True)
    Path(spec.out).write_text(json.dumps(cal, indent=1) + "\n")
    print(f"{spec.out}: {len(scores)} token scores from {len(examples)} {spec.split} examples")
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
