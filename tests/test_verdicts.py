"""The verdict rule (harness/metrics/verdicts.py): the exact McNemar test on discordant pairs,
Holm's correction over a family, the bootstrap interval and p, pairing by example id."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from harness.metrics import quality
from harness.metrics.verdicts import (
    ALPHA,
    BOOTSTRAP,
    MCNEMAR,
    N_BOOT,
    SEED,
    compare_records,
    compare_scores,
    family,
    holm,
    mcnemar_exact,
)


def _scores(values) -> dict[str, float]:
    return {f"ex{i:04d}": float(v) for i, v in enumerate(values)}


def _run(agree_right: int, a_only: int, b_only: int, agree_wrong: int):
    """Two runs' scores on the same examples with the given concordant and discordant counts."""
    a = [1] * agree_right + [1] * a_only + [0] * b_only + [0] * agree_wrong
    b = [1] * agree_right + [0] * a_only + [1] * b_only + [0] * agree_wrong
    return _scores(a), _scores(b)


def test_a_worked_example_discordant_pairs_exact_p_and_holm_order():
    """Three comparisons of one table, their discordant pairs 15 vs 6, 20 vs 4 and 3 vs 14: each
    p is scipy's two-sided exact binomial test of the discordant pairs, and Holm's adjustment
    (computed here by hand: sort, multiply by m - rank, keep monotone) decides the verdicts."""
    cases = [(100, 15, 6, 79), (90, 20, 4, 86), (95, 3, 14, 88)]
    table = family([compare_scores(*_run(*c)) for c in cases])
    raw = [binomtest(k, k + m, 0.5).pvalue for _, k, m, _ in cases]
    for c, (_, k, m, _), p in zip(table, cases, raw, strict=True):
        assert c.test == MCNEMAR and c.n == 200 and (c.a_only, c.b_only) == (k, m)
        assert c.p == pytest.approx(p, rel=1e-12)
        assert c.diff == pytest.approx((k - m) / 200)
    # by hand: 20 vs 4 smallest (x3), then 3 vs 14 (x2), then 15 vs 6 (x1), running maximum
    order = sorted(range(3), key=lambda i: raw[i])
    assert order == [1, 2, 0]
    want = [0.0] * 3
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[i]))
        want[i] = running
    assert [c.p_adjusted for c in table] == pytest.approx(want, rel=1e-12)
    assert want[1] < want[2] < ALPHA < want[0]  # 15 vs 6, p = 0.078, is the one above
    assert [c.verdict for c in table] == ["no difference", "better", "worse"]
    # 15 vs 6 is p = 2 * P(X <= 6), X ~ Bin(21, 1/2), by hand
    assert mcnemar_exact(15, 6) == pytest.approx(
        2 * sum(math.comb(21, i) for i in range(7)) / 2**21
    )
    assert mcnemar_exact(6, 15) == mcnemar_exact(15, 6)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(5, 5) == 1.0


def test_holm_keeps_order_and_leaves_untested_out():
    """A NaN p (no paired example) is no test: not counted in m, its adjusted p NaN."""
    got = holm([0.01, math.nan, 0.04, 0.03])
    assert math.isnan(got[1])
    assert got[0] == pytest.approx(0.03) and got[3] == pytest.approx(0.06)
    assert got[2] == pytest.approx(0.06)  # 0.04 x 1 < 0.06: kept monotone
    assert holm([]) == []


def test_one_planted_effect_among_many_nulls_is_the_only_better():
    """A table of 25 comparisons at n = 200: 24 routers drawn at the control's accuracy and one
    that fixes 30 of its wrong answers. Uncorrected, some nulls read p < 0.05 here; with Holm's
    correction only the planted one is called better and no null is called anything."""
    rng = np.random.default_rng(7)
    n = 200
    control = (rng.random(n) < 0.5).astype(float)
    rows = []
    for _ in range(24):
        rows.append((rng.random(n) < 0.5).astype(float))
    planted = control.copy()
    planted[np.flatnonzero(control == 0)[:30]] = 1.0
    rows.insert(11, planted)
    comparisons = [compare_scores(_scores(r), _scores(control)) for r in rows]
    assert sum(c.p < ALPHA for i, c in enumerate(comparisons) if i != 11) >= 1  # chance hits
    table = family(comparisons)
    assert [i for i, c in enumerate(table) if c.verdict != "no difference"] == [11]
    assert table[11].verdict == "better" and table[11].p_adjusted < ALPHA


def test_bootstrap_interval_and_continuous_p():
    """The interval is `quality.bootstrap_ci` of the paired differences (N_BOOT resamples,
    SEED); a graded metric gets the bootstrap p, below ALPHA when the interval excludes 0."""
    rng = np.random.default_rng(3)
    a, b = rng.random(150), rng.random(150)
    c = compare_scores(_scores(a + 0.2), _scores(b))
    assert c.test == BOOTSTRAP and c.a_only is None
    assert (c.ci_low, c.ci_high) == pytest.approx(
        quality.bootstrap_ci(a + 0.2 - b, n_boot=N_BOOT, seed=SEED)
    )
    assert c.ci_low > 0 and c.p == pytest.approx(2 / (N_BOOT + 1)) and c.verdict == "better"
    same = compare_scores(_scores(a), _scores(a))
    assert same.p == 1.0 and same.verdict == "no difference"
    noise = compare_scores(_scores(a), _scores(b))
    assert (noise.ci_low < 0 < noise.ci_high) == (noise.p >= ALPHA)


def test_rows_of_different_n_pair_on_the_examples_both_scored():
    """A run of 678 examples against one of 200 (the first 200 ids) and a failed record: paired
    by example id on the 199 both scored without failing, whatever the records' order."""
    ids = [f"test-{i:04d}" for i in range(678)]
    rng = np.random.default_rng(1)
    big = [{"example_id": i, "scores": {"em": float(rng.random() < 0.6)}} for i in ids]
    small = [{"example_id": i, "scores": {"em": float(rng.random() < 0.5)}} for i in ids[:200]]
    small[5] = {**small[5], "error": "timeout"}
    c = compare_records(big[::-1], small, "em")
    both = [
        (x["scores"]["em"], y["scores"]["em"])
        for x, y in zip(big, small, strict=False)
        if not y.get("error")
    ]
    assert c.n == 199 == len(both)
    assert c.diff == pytest.approx(np.mean([x - y for x, y in both]))
    assert c.a_only == sum(x > y for x, y in both) and c.b_only == sum(x < y for x, y in both)
    empty = compare_records(big, [], "em")
    assert empty.n == 0 and empty.verdict == "—"
