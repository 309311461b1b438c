"""Speculative decoding (Leviathan et al. 2022) as a router over the one decoding core.

Each step small drafts k tokens, large verifies all of them in one forward pass (the core's
`verify`, k+1 rows of p), and this router keeps the accepted prefix and names large's next token:
the correction at the first rejected position, or a bonus token when every draft is accepted.
The core then crops both caches to the kept tokens (its `rollback`). The output is distributed
exactly as large's own sampling; at temperature 0 it equals large's greedy output token for token.

    hybridbench generate --router speculative --router-arg k=4 --prompt "What is 17*23?"
    hybridbench generate --router speculative --router-arg adaptive=true --prompt "..."

With `adaptive=true` k is chosen each step for the most expected tokens per second from the
acceptance rate so far and the machine's measured pass costs (the CLI measures them once per
machine, `harness.backends.pass_costs.pass_costs`), k = 0 (large alone) included;
`schedule=heuristic` follows HF's heuristic k schedule instead.

Notation, as in the paper and `harness.core.router`: q = small's next-token distribution, p = large's,
both exactly the distributions the core samples from (`harness.core.sampling.distribution`).
"""

from __future__ import annotations

import bisect

import torch

from harness.core.router import Decision, Needs, Router, StepView
from harness.core.sampling import distribution


def speculative_sampling(
    draft: torch.Tensor, q: torch.Tensor, p: torch.Tensor, generator: torch.Generator
) -> tuple[int, int]:
    """Leviathan et al.'s acceptance rule: how many drafted tokens to keep, and large's next token.

    draft: [k] token ids x_1..x_k, x_i drawn from q_i.
    q:     [k, V] small's distributions q_i(.) that x_i was drawn from.
    p:     [k+1, V] large's distributions p_i(.) at the same positions, plus p_{k+1} after x_k.

    For i = 1..k: draw r ~ U(0, 1); accept x_i if r < min(1, p_i(x_i) / q_i(x_i)).
    At the first rejection i, return (i-1, y) with y ~ norm(max(0, p_i - q_i)) (the residual).
    If all k are accepted, return (k, y) with the bonus token y ~ p_{k+1}.
    The emitted tokens are then distributed exactly as samples from p (the paper's Theorem 3.5).
    All randomness comes from `generator`.

    Example: q_1 = p_1 = [0.5, 0.5, 0, ...] accepts any x_1 with probability 1.
    """
    k = len(draft)
    u = torch.rand(k, generator=generator)
    p_x = p[torch.arange(k), draft]
    q_x = q[torch.arange(k), draft]
    # r < p/q  <=>  r * q < p: no division, and q_x > 0 always holds for a token drawn from q
    rejected = torch.nonzero(u * q_x >= p_x).flatten()
    if len(rejected) == 0:
        return k, _draw(p[k], generator)
    i = int(rejected[0])
    residual = torch.clamp(p[i] - q[i], min=0.0)
    if residual.sum() <= 0:  # p_i == q_i up to rounding: rejection had probability ~0
        residual = p[i]
    return i, _draw(residual / residual.sum(), generator)


def greedy_accept(draft: torch.Tensor, large_logits: torch.Tensor) -> tuple[int, int]:
    """Temperature 0: keep drafted tokens while each equals large's argmax; large's next token is
    the argmax at the first mismatch (or after the last draft). The limit T -> 0 of
    `speculative_sampling`, where q and p are one-hot, without drawing randomness."""
    best = large_logits.argmax(-1)
    k = len(draft)
    mismatch = torch.nonzero(draft != best[:k]).flatten()
    n = int(mismatch[0]) if len(mismatch) else k
    return n, int(best[n])


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


# Acceptance prior of the cost-aware schedule: 3 accepted drafts to 1 rejection (alpha = 0.75),
# worth four observed tokens; and how many verify steps it sees before it may stop speculating.
PRIOR_ACCEPTED, PRIOR_REJECTED, MIN_STEPS = 3.0, 1.0, 6
SCHEDULES = ("cost", "heuristic")


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one greedy step emits when each drafted token is accepted with probability alpha
    independently: the accepted prefix plus large's token (Leviathan et al.'s (1 - a^(k+1)) / (1 - a))."""
    return float(k + 1) if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def seconds_for(table: dict, n: int) -> float:
    """Seconds of one pass of n tokens, linear between (and beyond) the measured sizes."""
    pts = sorted((int(m), float(s)) for m, s in table.items())
    if len(pts) == 1:
        return pts[0][1] * n / pts[0][0]
    i = min(max(bisect.bisect_left([m for m, _ in pts], n), 1), len(pts) - 1)
    (n0, s0), (n1, s1) = pts[i - 1], pts[i]
    return s0 + (s1 - s0) * (n - n0) / (n1 - n0)


def best_k(alpha: float, costs: dict, max_k: int) -> int:
    """The draft length with the most expected tokens per second: k small steps of one token and
    one large pass of k + 1 tokens emit `expected_tokens(alpha, k)`; k = 0 is large alone."""

    def rate(k: int) -> float:
        if k == 0:
            return 1.0 / seconds_for(costs["large"], 1)
        step = k * seconds_for(costs["small"], 1) + seconds_for(costs["large"], k + 1)
        return expected_tokens(alpha, k) / step

    return max(range(max_k + 1), key=rate)


class Speculative(Router):
    """Small drafts `k` tokens, large verifies them in one pass, the acceptance rule decides.

    `adaptive=true` adapts k within a generation; each prompt starts again from `k`.
    - `schedule=cost` (the default), from `costs`: seconds of one pass of n tokens per role,
      {"small": {n: s}, "large": {n: s}}, which the CLI measures once per machine
      (`harness.backends.pass_costs.pass_costs`, through `backends(engine)`) unless given. After each step
      the acceptance rate alpha is re-estimated (accepted drafts over accepted + rejections, from
      a 0.75 prior worth four tokens) and k is the `best_k` for alpha, up to `max_k`. When the
      best is k = 0 (after at least 6 verify steps) speculation cannot pay on this machine at this
      rate, and large decodes the rest alone: coming back would cost small a catch-up pass over
      every token it skipped, which on a CPU is most of what the pause saved.
    - `schedule=heuristic`: HF's "heuristic" schedule: after a step where every drafted token was
      accepted k += 2, else k = max(1, k - 1), capped at `max_k` (HF's "heuristic_transient").
    """

    name = "speculative"

    def __init__(
        self,
        k: int = 4,
        adaptive: bool = False,
        max_k: int = 32,
        schedule: str = "cost",
        costs: dict | None = None,
    ):
        if not 1 <= k <= max_k:
            raise ValueError(f"k must be in [1, max_k={max_k}], got {k}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        if costs is not None and not (
            isinstance(costs, dict) and {"small", "large"} <= set(costs) and all(costs.values())
        ):
            raise ValueError("costs must map 'small' and 'large' to {tokens: seconds} tables")
        self.k, self.adaptive, self.max_k, self.schedule = k, bool(adaptive), max_k, schedule
        self.costs, self._costs_given = costs, costs is not None
        self.reset()

    def reset(self) -> None:
        self._k, self._steps = self.k, 0
        self._accepted, self._rejected = PRIOR_ACCEPTED, PRIOR_REJECTED

    def needs(self) -> Needs:
        if self._k == 0:  # large alone (the cost-aware schedule stopped speculating)
            return Needs(draft_len=0)
        return Needs(draft_len=self._k, large_logits=True)

    def decide(self, view: StepView) -> Decision:
        if view.temperature <= 0:
            n, tok = greedy_accept(view.draft, view.large_logits)
        else:
            q = distribution(view.small_logits, view.temperature, view.top_p)
            p = distribution(view.large_logits, view.temperature, view.top_p)
            n, tok = speculative_sampling(view.draft, q, p, view.generator)
        if self.adaptive:
            # the core may draft fewer than asked (EOS, token budget): judge by what was drafted
            all_kept = n == len(view.draft)
            if self.schedule == "cost":
                if not self.costs:
                    raise ValueError(
                        "adaptive speculative decoding (schedule=cost) needs the machine's pass "
                        "costs: give costs=, or let the CLI measure them (router.backends(engine))"
                    )
                self._steps += 1
                self._accepted += n
                self._rejected += not all_kept
                alpha = self._accepted / (self._accepted + self._rejected)
                k = best_k(alpha, self.costs, self.max_k)
                self._k = k if k or self._steps >= MIN_STEPS else max(1, self._k)
            else:
                self._k = min(self.max_k, self._k + 2) if all_kept else max(1, self._k - 1)
        return Decision(keep=n, defer=True, large_token=tok)

    def batch_shape(self) -> dict[str, tuple[int, int]]:
        """k one-token drafts of small, one verify pass of k + 1 tokens of large (the fixed k,
        or the adaptive schedule's first)."""
        return {"small": (self.k, 1), "large": (1, self.k + 1)}

    def backends(self, engine) -> dict:
        """No models of its own; an adaptive router without a cost table gets this machine's
        (measured once per machine and models, then cached: `harness.backends.pass_costs.pass_costs`)."""
        if self.adaptive and self.schedule == "cost" and self.costs is None:
            self.costs = engine.pass_costs()
        return {}

    def describe(self) -> dict:
        out = {"k": self.k, "adaptive": self.adaptive, "max_k": self.max_k}
        if self.adaptive:
            out["schedule"] = self.schedule
        if self._costs_given:  # given, a table is a setting; measured, a fact of the machine
            out["costs"] = self.costs
        return out
