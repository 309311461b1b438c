"""The router protocol: a router is a policy, not a loop.

The decoding core (`harness/core/loop.py`) runs every model; a router only says what it needs before
each step (`needs()`) and, after the core has drafted and scored, decides (`decide()`):
how many of small's drafted tokens to keep, and whether the next token comes from large.

One step of the core, as a router sees it:

    needs = router.needs()              # Needs(draft_len=k, large_logits=..., reward=..., ...)
    small drafts k tokens               # view.draft, view.small_logits[k, V] or view.small_stats
                                        # (needs.small_logits), view.small_hidden[k, H]
    reward model scores them            # view.reward[k]           (if needs.reward)
    large verifies them in one pass     # view.large_logits[k+1, V] (if needs.large_logits)
    d = router.decide(view)             # Decision(keep=j, defer=...)
    emit draft[:j]; if d.defer: emit one large token (d.large_token, else sampled from large)

`draft_len == 0` means small does not run at all and every token comes from large.
Query-level routers set `needs().query` and decide once per prompt in `route_query()`.

Notation for probabilities, pinned once: q = small's next-token distribution, p = large's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.core.stats import ARGMAX, FULL, STATS, TokenStats, token_stats

SMALL_LOGITS = (FULL, STATS, ARGMAX)  # Needs.small_logits: what of q a router reads (stats.LEVELS)


@dataclass(frozen=True)
class Needs:
    """What a router asks the core to compute before `decide`."""

    draft_len: int = 1  # tokens small drafts this step (0: small does not run; large emits)
    large_logits: bool = False  # run large over the draft first (verify): view.large_logits
    small_hidden: bool = False  # small's last hidden state at each drafted position
    reward: bool = False  # reward-model score of each drafted token
    query: bool = False  # a query-level router: route_query() once per prompt, then no decide()
    # what of q the view holds: "full" rows (view.small_logits), "stats" (view.small_stats:
    # argmax, top-1 probability, entropy, top-2 margin, computed where the logits are) or
    # "argmax" (the draft only). Only "full" copies whole vocabulary rows to the host every step; at
    # temperature > 0 the rows are there whatever this says (sampling reads them).
    small_logits: str = "full"

    def __post_init__(self):
        if self.small_logits not in SMALL_LOGITS:
            hint = ' ("none" is spelled "argmax")' if self.small_logits == "none" else ""
            raise ValueError(
                f"small_logits must be one of {SMALL_LOGITS}, got {self.small_logits!r}{hint}"
            )


@dataclass(frozen=True)
class StepView:
    """What the core shows a router at one decode step (tensors on CPU, float32)."""

    n_generated: int  # tokens emitted before this step
    draft: torch.Tensor  # [k] token ids small proposed
    small_logits: torch.Tensor | None  # [k, V] logits q that produced each drafted token
    #                                    (None unless needs().small_logits == "full" or sampling)
    small_hidden: torch.Tensor | None  # [k, H] small's last hidden state at those positions
    large_logits: torch.Tensor | None  # [k+1, V] large's logits p at the k drafted positions + 1
    reward: torch.Tensor | None  # [k] reward score of each drafted token
    temperature: float  # 0 means greedy
    top_p: float  # nucleus mass used when sampling
    generator: torch.Generator  # the generation's seeded RNG; routers draw from it, never global
    small_stats: TokenStats | None = None  # [k] rows of q's summary when small_logits is None

    def stats(self) -> TokenStats:
        """Small's per-token summary (argmax, top-1 probability, entropy, top-2 margin): the one
        the core handed over, else computed from `small_logits` (teacher-forced views)."""
        if self.small_stats is not None:
            return self.small_stats
        return token_stats(self.small_logits, STATS)


@dataclass(frozen=True)
class Decision:
    """A router's answer for one step."""

    keep: int  # drafted tokens accepted, a prefix of the draft: 0 <= keep <= k
    defer: bool  # after the kept tokens, the next token comes from large
    large_token: int | None = None  # large's token if the router chose it (speculative residual)


@dataclass(frozen=True)
class QueryView:
    """What a query-level router sees: the prompt, and small's prefill, which costs nothing extra."""

    prompt_ids: torch.Tensor  # [n] prompt token ids
    prompt_hidden: torch.Tensor  # [H] small's last hidden state mean-pooled over the prompt
    generator: torch.Generator  # seeded RNG of this generation


class Router:
    """Base class: override `needs` and `decide` (token routers) or `route_query` (query routers).

    `reset()` is called before each prompt; routers with per-generation state clear it there.
    """

    name = "router"

    def reset(self) -> None:
        pass

    def needs(self) -> Needs:
        return Needs()

    def decide(self, view: StepView) -> Decision:
        raise NotImplementedError

    def route_query(self, view: QueryView) -> bool:
        """True when the whole answer should come from large."""
        raise NotImplementedError

    def describe(self) -> dict:
        """Arguments that identify this router's setting in result files."""
        return {}

    def backends(self, engine) -> dict:
        """Models this router brings (role -> Backend), e.g. the reward model; the CLI attaches them
        to the engine before decoding. Routers never call them: the core does."""
        return {}

    def batch_shape(self) -> dict[str, tuple[int, int]] | None:
        """What one decode step asks of each model, role -> (calls, tokens a row per call), for
        `--batch auto` to measure (`harness.backends.batch_size`); None: one one-token call of each."""
        return None

    def used_example_ids(self) -> frozenset[str]:
        """Ids of task examples this router was trained or calibrated on; never evaluated on."""
        return frozenset()

    def trained_on(self) -> tuple[str, ...]:
        """Tasks whose examples trained this router (the prefix of each id, e.g. "gsm8k" of
        "gsm8k/train/12"): by default those of every used id, so a router whose only learned
        parameter is a calibrated threshold (entropy) names its calibration's task; one with a
        trained scorer names the scorer's (CITER's MLP, the reward model). Empty for a router
        that learned nothing. A run on a task not listed here is a transfer run, and its records
        say so."""
        return tasks_of(self.used_example_ids())


def tasks_of(example_ids) -> tuple[str, ...]:
    """The tasks of example ids, sorted: each id's prefix before its first "/", lower-cased
    (humaneval's ids keep the dataset's own "HumanEval/0"; the others start with the task's
    name, "gsm8k/train/12")."""
    return tuple(sorted({i.split("/", 1)[0].lower() for i in example_ids}))


class TokenRouter(Router):
    """A per-token router: defer at the first drafted token that `defer_mask` flags.

    Drafting k > 1 tokens and keeping the prefix before the first flagged one gives the same
    output as deciding one token at a time (each drafted token only depends on the kept prefix),
    so `draft_len` is a speed knob, not a policy change.
    """

    draft_len = 1
    small_logits = "full"  # what of q `defer_mask` reads (Needs.small_logits)

    def needs(self) -> Needs:
        return Needs(draft_len=self.draft_len, small_logits=self.small_logits)

    def defer_mask(self, view: StepView) -> torch.Tensor:
        """[k] bool: True where the drafted token should be replaced by large's."""
        raise NotImplementedError

    def decide(self, view: StepView) -> Decision:
        mask = self.defer_mask(view)
        bad = torch.nonzero(mask).flatten()
        if len(bad) == 0:
            return Decision(keep=len(view.draft), defer=False)
        return Decision(keep=int(bad[0]), defer=True)


class SmallOnly(Router):
    """Every token from small; large never runs."""

    name = "small"

    def needs(self) -> Needs:
        return Needs(draft_len=1, small_logits="argmax")

    def decide(self, view: StepView) -> Decision:
        return Decision(keep=len(view.draft), defer=False)


class LargeOnly(Router):
    """Every token from large; small never runs (draft_len 0)."""

    name = "large"

    def needs(self) -> Needs:
        return Needs(draft_len=0)
