"""The verdict rule: when a paired difference between two runs reads better or worse.

Every page and command that prints a verdict (a task page's paired tables and the index matrix,
`hybridbench compare`, `hybridbench experiment verdicts`, `hybridbench submit`) takes it from
here. Two runs A and B are paired on the examples both scored without failing, matched by
example id (rows decoded on different numbers of examples are paired on the ones they share, and
`n` says how many). Then:

- difference: mean over the paired examples of score(A) - score(B), with its 95% percentile
  bootstrap interval: `N_BOOT` resamples of the paired examples (in example-id order), numpy
  PCG64 seeded with `SEED` (`quality.bootstrap_draws`).
- test, binary metric (every paired score 0 or 1: exact match, pass@1, accuracy): the exact
  McNemar test. Of the discordant pairs, `a_only` examples A got right and B wrong, `b_only` the
  reverse; under "no difference" each discordant pair falls either way with probability 1/2,
  so p = min(1, 2 * P(X <= min(a_only, b_only))), X ~ Binomial(a_only + b_only, 1/2) (the
  two-sided exact binomial test; 1 when there is no discordant pair).
- test, continuous metric (ROUGE, a graded score): a two-sided bootstrap p from the same
  resamples as the interval, p = min(1, 2 * (min(k_le, k_ge) + 1) / (N_BOOT + 1)) where k_le
  and k_ge count the resampled mean differences <= 0 and >= 0. It is the interval inverted: p is
  below 0.05 about when the 95% interval excludes 0; it is never below 2 / (N_BOOT + 1).
- family: the comparisons one table or page makes are adjusted together with Holm's step-down
  correction (`holm`); a comparison with no paired example is no test and not counted.
- verdict: "better" (A above B) or "worse" when the Holm-adjusted p is below `ALPHA`, the
  direction the difference's sign; "no difference" otherwise; "—" without a paired example.

Worked example (`mcnemar_exact`): discordant pairs 15 vs 6 give p = 2 * P(X <= 6), X ~ Bin(21,
1/2) = 2 * 82160 / 2097152 = 0.0784; among three comparisons with p 0.0784, 0.004 and 0.02, Holm
multiplies the smallest by 3 (0.012), the next by 2 (0.04) and the largest by 1 (0.0784): two
verdicts, the third "no difference".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from harness.metrics.quality import bootstrap_draws, example_score, ok_records

N_BOOT = 10_000  # bootstrap resamples of every paired interval (and a continuous metric's p)
SEED = 0  # the resamples' seed (numpy PCG64)
ALPHA = 0.05  # a verdict reads better or worse when the Holm-adjusted p is below this
NAN = float("nan")
MCNEMAR, BOOTSTRAP = "exact McNemar", "bootstrap"  # the two tests, as pages name them


@dataclass(frozen=True)
class Comparison:
    """Run A against run B on the examples both scored."""

    n: int  # examples paired (both scored, matched by example id); 0: nothing to compare
    diff: float  # mean of score(A) - score(B) over them
    ci_low: float  # 95% paired percentile bootstrap interval of `diff` (N_BOOT, SEED)
    ci_high: float
    test: str  # MCNEMAR (binary metric) or BOOTSTRAP (continuous), "" when n is 0
    p: float  # the test's two-sided p; NaN when n is 0
    a_only: int | None = None  # binary: examples A got right and B wrong (None: continuous)
    b_only: int | None = None  # binary: examples B got right and A wrong
    p_adjusted: float = NAN  # Holm-adjusted over its family (`family`); alone: p itself

    @property
    def verdict(self) -> str:
        """better | worse | no difference, from the adjusted p and the sign; — when n is 0."""
        if not self.n or math.isnan(self.p_adjusted):
            return "—"
        if self.p_adjusted < ALPHA and self.diff != 0:
            return "better" if self.diff > 0 else "worse"
        return "no difference"


NOTHING = Comparison(0, NAN, NAN, NAN, "", NAN)  # no example paired


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p of discordant counts `a_only` vs `b_only` (see the module).

    >>> round(mcnemar_exact(15, 6), 4)
    0.0784
    """
    n, k = a_only + b_only, min(a_only, b_only)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def bootstrap_p(means: np.ndarray) -> float:
    """Two-sided p that the mean difference is 0, from its resampled means (see the module)."""
    k = min(int((means <= 0).sum()), int((means >= 0).sum()))
    return min(1.0, 2 * (k + 1) / (means.size + 1))


def compare_scores(
    a: Mapping[str, float], b: Mapping[str, float], n_boot: int = N_BOOT, seed: int = SEED
) -> Comparison:
    """A ({example id: score}) against B on the ids both hold, alone in its family (its
    adjusted p is its p; `family` adjusts several together)."""
    ids = sorted(set(a) & set(b))
    if not ids:
        return NOTHING
    x = np.array([a[i] for i in ids], dtype=float)
    y = np.array([b[i] for i in ids], dtype=float)
    d = x - y
    means = bootstrap_draws(d.size, lambda idx: d[idx].mean(axis=1), n_boot, seed)
    lo, hi = np.percentile(means, [2.5, 97.5])
    diff = float(d.mean())
    if np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all():
        a_only, b_only = int(((x == 1) & (y == 0)).sum()), int(((x == 0) & (y == 1)).sum())
        p = mcnemar_exact(a_only, b_only)
        return Comparison(d.size, diff, float(lo), float(hi), MCNEMAR, p, a_only, b_only, p)
    p = bootstrap_p(means)
    return Comparison(d.size, diff, float(lo), float(hi), BOOTSTRAP, p, p_adjusted=p)


def compare_records(
    a: Sequence[dict], b: Sequence[dict], metric: str, n_boot: int = N_BOOT, seed: int = SEED
) -> Comparison:
    """`compare_scores` of two runs' records: the primary `metric` of their non-failed records
    (a later record of an example id replaces an earlier one)."""
    return compare_scores(example_scores(a, metric), example_scores(b, metric), n_boot, seed)


def example_scores(records: Sequence[dict], metric: str) -> dict[str, float]:
    """{example id: its primary `metric`} of a run's non-failed records (a later record of an
    example id replaces an earlier one)."""
    return {str(r["example_id"]): example_score(r, metric) for r in ok_records(records)}


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: sorted ascending, the i-th
    smallest (from 0) of m is multiplied by m - i, kept at least the previous one's, capped at
    1. NaN entries (no test) stay NaN and are not counted in m.

    >>> [round(p, 4) for p in holm([0.0784, 0.004, 0.02])]
    [0.0784, 0.012, 0.04]
    """
    tested = sorted((p, i) for i, p in enumerate(ps) if not math.isnan(p))
    out, running = [NAN] * len(ps), 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        out[i] = running
    return out


def family(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """The comparisons with their p adjusted together (`holm`): one table's or page's family."""
    adjusted = holm([c.p for c in comparisons])
    return [replace(c, p_adjusted=q) for c, q in zip(comparisons, adjusted, strict=True)]
