"""The oracle's rows from large-only answers (`run --router oracle --reuse-answers S,L`).

At temperature 0 the oracle emits large's greedy answer, and it defers exactly where small's
greedy token differs from large's along that answer. Decoding it runs both models step by step;
here both are known from cheaper passes: large's tokens from a large-only run of the same
prompts, small's greedy token at every position of that answer from ONE teacher-forced pass of
small over prompt + answer. The core's own decode loop then runs the oracle over `Replayed`
models that return those tokens (as one-hot rows), so provenance, steps and forwards come out as
decoding gives them, and a modeled clock advances each pass by what a pass of that size costs on
this machine (`harness.backends.pass_costs.pass_costs`), so the row's timers and throughput are modeled
(marked so in the summary). Only the oracle with one drafted token per step replays exactly:
small then only ever reads emitted tokens, which are large's answer.

Where it can differ from decoding: small's teacher-forced pass reads the answer in multi-token
passes, whose llama.cpp kernels round differently from one-token steps (a near-tie may flip, as
with batching; README "Batched evaluation"); and at an answer's end-of-sequence the replayed
large model emits small's end token when small proposes one of `eos_ids`, else the first
(the records keep token ids without the end token, so only that last step's counts can differ).

`replay_timed` (recorded rows timed on a GPU machine, `benchmarks/device_latency.py`) replays a
recorded row of either control, a token router or speculative decoding step for step
over models that also run each pass on a backend of the same shape, to time that schedule on
other hardware with a wall clock.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from harness.core.records import Generation
from harness.core.scheduler import Job, generate


class ModeledClock:
    """A clock that only the replayed passes advance."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Replayed:
    """A model whose greedy next token after each position of `seq` from `start - 1` on is
    known (`next_ids`); fed other tokens (a rejected draft), its rows after them are
    placeholders the oracle never reads (it keeps a draft up to its first mismatch)."""

    def __init__(self, role, seq, next_ids, start, n_vocab, info, clock, seconds):
        self.role, self.seq, self.next_ids, self.start = role, list(seq), list(next_ids), start
        self.n_vocab, self.info, self.clock, self.seconds = n_vocab, info, clock, seconds
        self.length, self.fed = 0, []

    def reset(self) -> None:
        self.length, self.fed = 0, []

    def crop(self, n: int) -> None:
        self.length = min(self.length, n)
        del self.fed[self.length :]

    def sync(self) -> None:
        pass

    def forward(self, ids: list[int], n_rows: int, hidden: bool = False):
        if hidden:
            raise ValueError("a replayed model has no hidden states")
        self.fed += list(ids)
        self.length += len(ids)
        self.clock.t += self.seconds(self.role, len(ids))
        rows = torch.zeros(n_rows, self.n_vocab)
        for r, pos in enumerate(range(self.length - n_rows, self.length)):
            known = pos - (self.start - 1)
            if 0 <= known < len(self.next_ids) and self.fed[: pos + 1] == self.seq[: pos + 1]:
                rows[r, self.next_ids[known]] = 1.0
        return rows, None


def teacher_forced(small, prompt_ids: list[int], answer_ids: list[int]) -> tuple[list[int], int]:
    """small's greedy token after each of the last len(answer) + 1 positions of prompt + answer
    (`harness.core.forcing.forced_passes`, 64 rows a pass), and the width of its logits."""
    from harness.core.forcing import FORCED_CHUNK, forced_passes

    out, width = [], 0
    # forced_passes never feeds a trajectory's last token: a placeholder after the answer makes
    # its last row the prediction after the answer's last token
    traj = list(answer_ids) + [0]
    for logits, _ in forced_passes(small, list(prompt_ids), traj, FORCED_CHUNK):
        out += logits.argmax(-1).tolist()
        width = logits.shape[-1]
    return out, width


def oracle_generations(engine, router, jobs, reuse: dict) -> Iterator[tuple[Job, object]]:
    """(job, Generation | exception) of the oracle on each job from the reused large answers
    (`reuse`: `harness.evaluation.runner.reused_runs`; the wall seconds spent replaying are added to its
    "spent"); a job without one is decoded as usual."""
    import time

    from harness.backends.pass_costs import pass_costs
    from routers.speculative import seconds_for

    if getattr(router, "draft_len", 1) != 1:
        raise ValueError("the oracle replays only with draft_len=1")
    costs = pass_costs(engine)
    seconds = lambda role, n: seconds_for(costs[role], n)  # noqa: E731
    small, large = engine.backends["small"], engine.backends["large"]
    rest = []
    for job in jobs:
        answer = (job.answers or {}).get("large")
        if answer is None:
            rest.append(job)
            continue
        t0 = time.perf_counter()
        try:
            out = _replay(engine, router, job, answer, small, large, seconds)
        except Exception as e:  # noqa: BLE001 - recorded as a failed example, as decoding does
            out = e
        reuse["spent"] = reuse.get("spent", 0.0) + time.perf_counter() - t0
        yield job, out
    if rest:
        yield from engine.generate_many(router, rest)


def _replay(engine, router, job, answer: Generation, small, large, seconds):
    prompt, ids = list(job.prompt_ids), list(answer.token_ids)
    eos = job.cfg.eos_ids or engine.eos_ids
    small_next, n_vocab = teacher_forced(small, prompt, ids)
    large_next = ids[:]
    if answer.stop_reason == "eos":  # large ended with an end token the record does not keep
        large_next.append(small_next[-1] if small_next[-1] in eos else eos[0])
    clock, start = ModeledClock(), len(prompt)
    models = {
        "small": Replayed(
            "small", prompt + ids, small_next, start, n_vocab, small.info, clock, seconds
        ),
        "large": Replayed(
            "large", prompt + large_next, large_next, start, n_vocab, large.info, clock, seconds
        ),
    }
    cfg = job.cfg if job.cfg.eos_ids else job.cfg.__class__(**{**job.cfg.__dict__, "eos_ids": eos})
    gen = generate(models, router, prompt, cfg, engine.decode, clock)
    if gen.token_ids != answer.token_ids:
        raise RuntimeError("the replayed oracle left large's answer (a bug in the replay)")
    return gen


# ------------------------------------------- a recorded row's pass schedule, timed elsewhere


class RecordedRouter:
    """Repeats a recorded generation's steps (`steps` columns: drafted, kept, large_tokens): the
    decisions of any token router, of small-only and large-only, and of speculative decoding
    (`verify`: large read each draft first). A reward or CITER row's own passes (reward model,
    hidden states) are not repeated: its small and large passes are."""

    name = "recorded"

    def __init__(self, steps: dict, verify: bool = False):
        self.steps, self.verify = steps, verify
        self.reset()

    def reset(self) -> None:
        self.i, self.alone, self.asked = 0, False, False

    def needs(self):
        """Asked before each step, and once before that for the query check; decide() moves to
        the next step, and so does asking again after a step where large ran alone (no decide)."""
        from harness.core.router import Needs

        drafted = self.steps["drafted"]
        if self.alone:
            self.i, self.alone = self.i + 1, False
        k = drafted[min(self.i, len(drafted) - 1)]
        self.alone, self.asked = k == 0 and self.asked, True
        return Needs(draft_len=k, large_logits=self.verify)

    def decide(self, view):
        from harness.core.router import Decision

        keep, large = self.steps["kept"][self.i], self.steps["large_tokens"][self.i]
        self.i += 1
        return Decision(keep=keep, defer=bool(large))


class Shadowed(Replayed):
    """A `Replayed` model that also runs every pass on `shadow`, a backend of the same shape
    (e.g. random weights on another machine), so a wall clock times the recorded schedule.
    Where it would propose `end` while `may_end()` is false it proposes another token instead
    (an end token cuts a draft short, and small drafted past the answer's end without one)."""

    def __init__(self, shadow, *args, end: int | None = None, may_end=lambda: True):
        super().__init__(*args)
        self.shadow, self.end, self.may_end = shadow, end, may_end

    def reset(self) -> None:
        super().reset()
        self.shadow.reset()

    def crop(self, n: int) -> None:
        super().crop(n)
        self.shadow.crop(n)

    def sync(self) -> None:
        self.shadow.sync()

    def forward(self, ids: list[int], n_rows: int, hidden: bool = False):
        self.shadow.forward(ids, n_rows)
        rows, h = super().forward(ids, n_rows, hidden)
        if self.end is not None and not self.may_end():
            hit = rows[:, self.end] > 0
            rows[hit, self.end] = 0.0
            rows[hit, int(self.end == 0)] = 1.0
        return rows, h


def replay_timed(
    shadows: dict, gen: dict, eos_id: int | None, max_new_tokens: int, verify: bool, clock
):
    """Decode a recorded generation (`Generation.to_json()` of a token router's row, small-only,
    large-only or speculative) again over `shadows` (role -> backend): the same steps emitting the
    same tokens, so the same passes of the same sizes, timed by `clock`. Prompt token ids are
    placeholders of the recorded length: a dense pass's cost does not depend on which ids.
    `eos_id`: the end token of a generation that stopped on one (None: the run had none);
    `max_new_tokens`: the run's budget; `verify`: the router had large read each draft
    (speculative decoding)."""
    from harness.core.loop import DecodeConfig

    ids, st = list(gen["token_ids"]), gen["steps"]
    prompt = [(7 * i) % 100 + 10 for i in range(gen["n_prompt_tokens"])]
    ended = gen["stop_reason"] == "eos"
    nxt = ids + [eos_id] if ended else ids
    router = RecordedRouter(st, verify)
    # small proposes the end token only in the last step, and only if it gave it there: the
    # last step emitted its kept draft, then large's token (a bonus after an accepted end token
    # is dropped), so the end token was small's if fewer than all kept tokens remain
    before = sum(st["kept"][:-1]) + sum(st["large_tokens"][:-1])
    by_small = ended and len(ids) - before < st["kept"][-1]
    last = len(st["drafted"]) - 1
    guard = {
        "small": {
            "end": eos_id if ended else None,
            "may_end": lambda: by_small and router.i == last,
        }
    }
    models = {
        role: Shadowed(
            s,
            role,
            prompt + nxt,
            nxt,
            len(prompt),
            s.n_vocab,
            s.info,
            ModeledClock(),
            lambda r, n: 0.0,
            **guard.get(role, {}),
        )
        for role, s in shadows.items()
    }
    if gen["stop_reason"] == "stop_string":  # no text here: stop where the run stopped
        max_new_tokens = len(ids)
    eos = () if eos_id is None else (eos_id,)
    cfg = DecodeConfig(max_new_tokens=max_new_tokens, temperature=0.0, eos_ids=eos)
    out = generate(models, router, prompt, cfg, None, clock)
    if list(out.token_ids) != ids or list(out.provenance) != list(gen["provenance"]):
        raise RuntimeError("the replay left the recorded generation (a bug in the replay)")
    return out
