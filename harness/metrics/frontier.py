"""Cross-run summaries of one router's quality-vs-cost curve: Pareto frontier, PGR, APGR, CPT, AIQ.

Each run of a router at one setting (threshold, rate, ...) gives one point (cost, quality), where
cost is a large-model share in [0, 1] (`large_token_share` or `large_call_share`, see
`harness.metrics.quality`) and quality the run's mean score. The functions here take those points as two
parallel sequences; NaN points are dropped. `q_small` and `q_large` are the qualities of the
small-only and large-only runs on the same examples.

    >>> apgr([0.5], [0.7], q_small=0.5, q_large=0.9)   # curve (0,0) (0.5,0.5) (1,1): area 0.5
    0.5
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

NAN = float("nan")


def _points(costs: Sequence[float], qualities: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Finite (cost, quality) pairs sorted by cost, then quality (a stable, total order)."""
    c, q = np.asarray(costs, dtype=float), np.asarray(qualities, dtype=float)
    if c.shape != q.shape:
        raise ValueError(f"costs and qualities differ in length: {c.shape} vs {q.shape}")
    keep = np.isfinite(c) & np.isfinite(q)
    c, q = c[keep], q[keep]
    order = np.lexsort((q, c))
    return c[order], q[order]


def quality_curve(costs: Sequence[float], qualities: Sequence[float]) -> tuple[list, list]:
    """The quality-vs-cost curve: the finite points sorted by cost (ties by quality)."""
    c, q = _points(costs, qualities)
    return c.tolist(), q.tolist()


def pareto_frontier(costs: Sequence[float], qualities: Sequence[float]) -> list[int]:
    """Indices of the points no other point dominates, ordered by cost (ties by index).

    Point j dominates i when cost_j <= cost_i and quality_j >= quality_i with at least one strict.
    Identical points do not dominate each other (both stay). NaN points are never on the frontier.
    Example: costs [0.1, 0.2, 0.3], qualities [0.5, 0.4, 0.6] -> [0, 2] (point 1 is dominated by 0).
    """
    c, q = np.asarray(costs, dtype=float), np.asarray(qualities, dtype=float)
    ok = [i for i in range(len(c)) if np.isfinite(c[i]) and np.isfinite(q[i])]
    front = [
        i
        for i in ok
        if not any(
            c[j] <= c[i] and q[j] >= q[i] and (c[j] < c[i] or q[j] > q[i]) for j in ok if j != i
        )
    ]
    return sorted(front, key=lambda i: (c[i], i))


def pgr(quality: float, q_small: float, q_large: float) -> float:
    """Performance gap recovered (RouteLLM): (quality - q_small) / (q_large - q_small); NaN if no gap."""
    gap = q_large - q_small
    return (quality - q_small) / gap if gap else NAN


def _pgr_curve(costs, qualities, q_small, q_large, anchor):
    c, q = np.asarray(costs, dtype=float), np.asarray(qualities, dtype=float)
    if anchor:
        finite = c[np.isfinite(c)]
        if finite.size and (finite.min() < 0 or finite.max() > 1):
            raise ValueError("costs must be shares in [0, 1] to anchor the curve at 0 and 1")
        c, q = np.append(c, [0.0, 1.0]), np.append(q, [q_small, q_large])
    c, q = _points(c, q)
    gap = q_large - q_small
    return c, ((q - q_small) / gap if gap else np.full_like(q, NAN))


def apgr(
    costs: Sequence[float],
    qualities: Sequence[float],
    q_small: float,
    q_large: float,
    anchor: bool = True,
) -> float:
    """Average performance gap recovered (RouteLLM, Ong et al. 2024): APGR = ∫_0^1 PGR(c) dc.

    PGR(c) is `pgr` of the router's quality at large share c; the integral is the trapezoid rule
    over the points sorted by cost, divided by the cost range they span — exactly RouteLLM's
    `evaluate.py` (AUC - weak_auc) / (strong_auc - weak_auc). With `anchor` (default) the points
    (0, q_small) and (1, q_large) are added (threshold extremes: all small, all large; RouteLLM's
    quantile thresholds include both), so the range is [0, 1] and the value is the paper's integral.
    APGR = 0.5 for the straight line from small to large (a random router). NaN with < 2 points,
    a zero cost range or q_large == q_small.
    Example: one point (0.5, PGR 0.8), anchored -> 0.5*(0+0.8)/2 + 0.5*(0.8+1)/2 = 0.65.
    """
    c, p = _pgr_curve(costs, qualities, q_small, q_large, anchor)
    if c.size < 2 or c[-1] == c[0]:
        return NAN
    area = float(np.sum((c[1:] - c[:-1]) * (p[1:] + p[:-1]) / 2))  # trapezoid rule
    return area / float(c[-1] - c[0])


def cpt(
    costs: Sequence[float],
    qualities: Sequence[float],
    q_small: float,
    q_large: float,
    x: float,
    anchor: bool = True,
) -> float:
    """Call-performance threshold CPT(x) (RouteLLM): the least large share at which PGR reaches x.

    x is a fraction (0.5 for CPT(50%)). Along the piecewise-linear curve through the points
    sorted by cost (anchored as in `apgr`), the first segment with PGR_i < x <= PGR_i+1 gives
    c = c_i + (x - PGR_i) / (PGR_i+1 - PGR_i) * (c_i+1 - c_i); if the first point already has
    PGR >= x its cost is returned. This is RouteLLM's `np.interp(target, accuracy, share)` for a
    curve whose quality rises with cost, and the first crossing when it does not. NaN when the
    curve never reaches x (RouteLLM's np.interp would clamp to the last share instead).
    Example: anchored points (0,0) (0.4,0.6) (1,1): CPT(0.5) = 0.5/0.6*0.4 = 1/3.
    """
    c, p = _pgr_curve(costs, qualities, q_small, q_large, anchor)
    if c.size == 0 or not np.isfinite(p).all():
        return NAN
    if p[0] >= x:
        return float(c[0])
    for i in range(c.size - 1):
        if p[i] < x <= p[i + 1]:
            return float(c[i] + (x - p[i]) / (p[i + 1] - p[i]) * (c[i + 1] - c[i]))
    return NAN


def nondecreasing_convex_hull(
    costs: Sequence[float], qualities: Sequence[float]
) -> tuple[list, list]:
    """RouterBench's non-decreasing convex hull of the points, as its vertices sorted by cost.

    The upper concave envelope of the points (every point on it is reachable by mixing two
    settings at random), cut at its highest-quality vertex: beyond that vertex the hull stays
    flat at the best quality (one can always pay more for no gain). Points below it are dropped.
    Example: (0, .5) (.5, .6) (.25, .4) (1, .9) (.8, .95) -> (0, .5) (.8, .95).
    """
    c, q = _points(costs, qualities)
    hull: list[tuple[float, float]] = []
    for pt in zip(c.tolist(), q.tolist(), strict=True):
        while len(hull) >= 2:
            (x0, y0), (x1, y1) = hull[-2], hull[-1]
            # Drop the middle vertex unless the path turns clockwise (right) at it.
            if (x1 - x0) * (pt[1] - y0) - (y1 - y0) * (pt[0] - x0) >= 0:
                hull.pop()
            else:
                break
        if hull and hull[-1][0] == pt[0]:
            hull.pop()  # same cost: the later point has the higher quality
        hull.append(pt)
    if not hull:
        return [], []
    best = max(range(len(hull)), key=lambda i: (hull[i][1], -i))
    hull = hull[: best + 1]
    return [h[0] for h in hull], [h[1] for h in hull]


def aiq(
    costs: Sequence[float],
    qualities: Sequence[float],
    cost_range: tuple[float, float] | None = None,
) -> float:
    """Average improvement in quality (RouterBench, Hu et al. 2024).

    AIQ = 1 / (c_max - c_min) * ∫_{c_min}^{c_max} H(c) dc, where H is the
    `nondecreasing_convex_hull` of the points (linear between vertices, flat at the best quality
    beyond the last vertex). `cost_range` defaults to the points' own (min cost, max cost); pass
    a common range to compare routers. A c_min below the cheapest point is a ValueError (H is not
    defined there); add the small model's point instead. NaN for no points or a zero range.
    Example: points (0, 0.5) (1, 0.9) -> (0.5 + 0.9) / 2 = 0.7.
    """
    hc, hq = nondecreasing_convex_hull(costs, qualities)
    if not hc:
        return NAN
    lo, hi = (
        cost_range
        if cost_range is not None
        else (hc[0], float(np.max(_points(costs, qualities)[0])))
    )
    if lo < hc[0]:
        raise ValueError(f"cost_range starts at {lo}, below the cheapest point {hc[0]}")
    if hi <= lo:
        return NAN
    xs = np.array(sorted({lo, hi, *[x for x in hc if lo < x < hi]}))
    ys = np.interp(xs, hc, hq)  # flat beyond the last vertex, like H
    area = float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2))
    return area / (hi - lo)
