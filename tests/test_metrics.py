"""Golden tests of harness.metrics.quality and harness.metrics.frontier on hand-built records and curves.

Every expected number is worked out by hand in the comment beside it.
"""

import math

import numpy as np
import pytest

from harness.metrics import frontier
from harness.metrics import quality as metrics

NAN = math.nan
MODELS = {  # manifest["models"]: only the fields the byte cost reads
    "small": {"weight_bytes": 1000, "kv_bytes_per_token": 10},
    "large": {"weight_bytes": 5000, "kv_bytes_per_token": 100},
}
MANIFEST = {"task": "t", "router": "r", "split": "test", "metric": "em", "models": MODELS}


def record(
    provenance, steps, forwards, score, seconds, ttft, error="", query_route="", ex="x"
) -> dict:
    """A record in the runner's JSON form; steps/forwards given as rows, stored as columns."""
    step_cols = ("drafted", "kept", "large_tokens", "large_called", "seconds")
    fw_cols = ("model", "phase", "tokens_in", "cache_len", "seconds")
    return {
        "example_id": ex,
        "split": "test",
        "completion": "",
        "scores": {"em": score},
        "generation": {
            "token_ids": list(range(len(provenance))),
            "text": "",
            "provenance": provenance,
            "stop_reason": "eos",
            "seconds": seconds,
            "ttft": ttft,
            "query_route": query_route,
            "n_prompt_tokens": 4,
            "steps": {c: [s[i] for s in steps] for i, c in enumerate(step_cols)},
            "forwards": {c: [f[i] for f in forwards] for i, c in enumerate(fw_cols)},
        },
        "seconds": seconds,
        "error": error,
    }


# A: 3 tokens (small, large, large), 3 steps all calling large, 8 forward passes.
A = record(
    provenance=[0, 1, 1],
    steps=[(1, 1, 0, True, 0.1), (1, 0, 1, True, 0.2), (1, 0, 1, True, 0.3)],
    forwards=[
        ("small", "prefill", 4, 0, 0.01),  # 1000 + 0*10   = 1000
        ("large", "prefill", 4, 0, 0.01),  # 5000 + 0*100  = 5000
        ("small", "draft", 1, 4, 0.01),  # 1000 + 4*10   = 1040
        ("large", "verify", 1, 4, 0.01),  # 5000 + 4*100  = 5400
        ("small", "draft", 1, 5, 0.01),  # 1000 + 5*10   = 1050
        ("large", "catch_up", 1, 5, 0.01),  # 5000 + 5*100 = 5500
        ("small", "draft", 1, 6, 0.01),  # 1000 + 6*10   = 1060
        ("large", "catch_up", 1, 6, 0.01),  # 5000 + 6*100 = 5600
    ],
    score=1.0,
    seconds=1.0,
    ttft=0.4,
    ex="A",
)
# A: small 4150, large 21500, catch_up 11100, total 25650 bytes; 4 large forwards.
# B: 1 small token, 1 step without large; small 1000 + (1000 + 2*10) = 2020 bytes.
B = record(
    provenance=[0],
    steps=[(1, 1, 0, False, 0.05)],
    forwards=[("small", "prefill", 2, 0, 0.01), ("small", "draft", 1, 2, 0.01)],
    score=0.0,
    seconds=0.5,
    ttft=0.45,
    ex="B",
)
FAILED = {**record([], [], [], 0.0, 0.0, NAN, ex="F"), "generation": {}, "error": "OOM"}
RECORDS = [A, B, FAILED]


def test_per_example_counts():
    assert metrics.n_emitted(A) == 3 and metrics.n_large_emitted(A) == 2
    assert metrics.n_steps(A) == 3 and metrics.n_large_steps(A) == 3
    assert metrics.n_large_forwards(A) == 4 and metrics.n_large_forwards(B) == 0
    assert metrics.n_emitted(FAILED) == 0 and metrics.n_steps(FAILED) == 0


def test_forward_bytes_and_example_bytes():
    assert metrics.forward_bytes(1000, 8, 10) == 1080  # 1000 + 10*8
    assert metrics.example_bytes(A, MODELS) == {
        "small": 4150.0,  # 1000 + 1040 + 1050 + 1060
        "large": 21500.0,  # 5000 + 5400 + 5500 + 5600
        "reward": 0.0,
        "router": 0.0,
        "catch_up": 11100.0,  # 5500 + 5600, part of large
        "total": 25650.0,  # 4150 + 21500
    }


def test_example_bytes_unknown_model_is_nan():
    only_small = {"small": MODELS["small"]}
    b = metrics.example_bytes(A, only_small)
    assert b["small"] == 4150.0 and math.isnan(b["large"]) and math.isnan(b["total"])


def test_shares_token_and_call():
    assert metrics.large_token_share(RECORDS) == 0.5  # (2 + 0) / (3 + 1); failed record left out
    assert metrics.large_call_share(RECORDS) == 0.75  # (3 + 0) / (3 + 1) steps
    assert metrics.draft_acceptance(RECORDS) == 0.5  # kept (1 + 1) / drafted (3 + 1)


def test_query_large_share():
    recs = [record([1], [], [], 1.0, 1, 0, query_route=q) for q in ("large", "small", "large")]
    assert metrics.query_large_share(recs) == pytest.approx(2 / 3)  # 2 of 3 routed to large
    assert math.isnan(metrics.query_large_share([A, B]))  # token-level: no query routes


def test_latency():
    lat = metrics.latency(RECORDS)
    assert lat["ttft_s"] == pytest.approx(0.425)  # (0.4 + 0.45) / 2
    assert lat["tpot_s"] == pytest.approx(
        0.3
    )  # A: (1.0 - 0.4) / (3 - 1); B has 1 token: NaN, skipped
    assert lat["e2e_s"] == pytest.approx(0.75)  # (1.0 + 0.5) / 2
    assert lat["decode_s"] == pytest.approx(0.325)  # (0.1+0.2+0.3 + 0.05) / 2
    assert lat["tok_per_s"] == pytest.approx(4 / 0.65)  # (3 + 1) tokens / (0.6 + 0.05) s
    assert metrics.time_per_output_token(A) == pytest.approx(0.3)


def test_summarize_golden():
    s = metrics.summarize(RECORDS, MANIFEST, n_boot=200)
    expected = {
        "n": 2,
        "n_failed": 1,
        "quality": 0.5,  # (1 + 0) / 2
        "large_token_share": 0.5,
        "large_call_share": 0.75,
        "draft_acceptance": 0.5,
        "tokens_per_example": 2.0,  # (3 + 1) / 2
        "steps_per_example": 2.0,  # (3 + 1) / 2
        "large_forwards_per_example": 2.0,  # (4 + 0) / 2
        "bytes_small": 3085.0,  # (4150 + 2020) / 2
        "bytes_large": 10750.0,  # 21500 / 2
        "bytes_catch_up": 5550.0,  # 11100 / 2
        "bytes_total": 13835.0,  # (25650 + 2020) / 2
        "bytes_reward": 0.0,
        "bytes_per_token": 6917.5,  # (25650 + 2020) / 4 tokens
    }
    for key, value in expected.items():
        assert s[key] == pytest.approx(value), key
    assert 0.0 <= s["quality_ci_low"] <= 0.5 <= s["quality_ci_high"] <= 1.0
    assert math.isnan(s["query_large_share"])
    assert all(isinstance(v, int | float | str) for v in s.values())  # flat, JSON-able


def test_nan_cases():
    # No records at all: every ratio and mean has an empty denominator.
    s = metrics.summarize([], MANIFEST)
    assert s["n"] == 0 and s["n_failed"] == 0
    for key in ("quality", "quality_ci_low", "large_token_share", "large_call_share", "ttft_s"):
        assert math.isnan(s[key]), key
    assert math.isnan(s["bytes_total"]) and math.isnan(s["tok_per_s"])
    # Only failed records: the same.
    assert math.isnan(metrics.quality([FAILED], "em"))
    # A record that emitted no tokens and ran no steps.
    empty = record([], [], [], 0.0, 0.1, NAN)
    assert math.isnan(metrics.large_token_share([empty]))
    assert math.isnan(metrics.large_call_share([empty]))
    assert math.isnan(metrics.draft_acceptance([empty]))
    assert math.isnan(metrics.latency([empty])["tok_per_s"])
    assert math.isnan(metrics.latency([empty])["ttft_s"])
    # Tokens but no steps (e.g. a core that did not record them): call share NaN, token share not.
    no_steps = record([1, 0], [], [], 1.0, 0.1, 0.05)
    assert metrics.large_token_share([no_steps]) == 0.5
    assert math.isnan(metrics.large_call_share([no_steps]))


def test_missing_score_raises():
    with pytest.raises(KeyError, match="no score 'acc'"):
        metrics.quality([A], "acc")


def test_bootstrap_ci():
    assert metrics.bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert all(math.isnan(v) for v in metrics.bootstrap_ci([]))
    x = np.random.default_rng(1).random(400)
    lo, hi = metrics.bootstrap_ci(x, n_boot=2000, seed=3)
    assert (lo, hi) == metrics.bootstrap_ci(x, n_boot=2000, seed=3)  # seeded: reproducible
    half = 1.96 * x.std() / math.sqrt(x.size)  # normal approximation of the 95% interval
    assert lo == pytest.approx(x.mean() - half, abs=0.01)
    assert hi == pytest.approx(x.mean() + half, abs=0.01)


def test_bootstraps_do_not_depend_on_record_order(monkeypatch):
    # a batched run writes records as they finish; summary.json, the report and the scripts
    # read them in different orders and must print the same interval (on mbpp calib, n = 40,
    # file order gave [0.175, 0.475] and id order [0.200, 0.475] before the sort)
    seen = []
    monkeypatch.setattr(metrics, "bootstrap_ci", lambda v, *a, **k: seen.append(list(v)) or (0, 1))
    ids = ["t/3", "t/10", "t/1", "t/2"]  # "t/1" < "t/10" < "t/2" < "t/3" as strings
    recs = [record([0], [], [], float(k), [], 0.0, ex=i) for k, i in enumerate(ids)]
    metrics.quality_ci(recs, "em")
    metrics.quality_ci(recs[::-1], "em")
    assert seen == [[2.0, 1.0, 3.0, 0.0]] * 2
    # the paired difference resamples its pairs in the same order
    zeros = [record([0], [], [], 0.0, [], 0.0, ex=i) for i in ids]
    seen.clear()
    metrics.paired_difference(recs, zeros, "em")
    metrics.paired_difference(recs[::-1], zeros, "em")
    assert seen == [[2.0, 1.0, 3.0, 0.0]] * 2


# ---------------------------------------------------------------- frontier

Q_S, Q_L = 0.5, 0.9  # PGR = (q - 0.5) / 0.4
# Points at large share 0.2, 0.4, 0.8 with PGR 0.5, 0.7, 0.9 -> q = 0.5 + 0.4 * PGR.
COSTS, QUALS = [0.8, 0.2, 0.4], [0.86, 0.70, 0.78]  # unsorted on purpose


def test_pgr():
    assert frontier.pgr(0.7, Q_S, Q_L) == pytest.approx(0.5)
    assert math.isnan(frontier.pgr(0.7, 0.5, 0.5))


def test_apgr_golden():
    # Anchored curve (0,0) (0.2,.5) (0.4,.7) (0.8,.9) (1,1), trapezoids:
    # 0.2*(0+.5)/2 + 0.2*(.5+.7)/2 + 0.4*(.7+.9)/2 + 0.2*(.9+1)/2 = .05+.12+.32+.19 = 0.68
    assert frontier.apgr(COSTS, QUALS, Q_S, Q_L) == pytest.approx(0.68)
    # RouteLLM's evaluate.py over the measured points only: (.12 + .32) / (0.8 - 0.2) = 0.7333
    assert frontier.apgr(COSTS, QUALS, Q_S, Q_L, anchor=False) == pytest.approx(0.44 / 0.6)
    # One point (0.5, PGR 0.8): 0.5*0.8/2 + 0.5*1.8/2 = 0.65
    assert frontier.apgr([0.5], [0.82], Q_S, Q_L) == pytest.approx(0.65)
    # Any point on the straight small-large line (random mixing): 0.5
    assert frontier.apgr([0.25, 0.75], [0.6, 0.8], Q_S, Q_L) == pytest.approx(0.5)


def test_apgr_nan_cases():
    assert math.isnan(frontier.apgr(COSTS, QUALS, 0.7, 0.7))  # no gap to recover
    assert math.isnan(frontier.apgr([0.3], [0.6], Q_S, Q_L, anchor=False))  # one point
    assert math.isnan(frontier.apgr(COSTS, QUALS, NAN, Q_L))  # no small reference
    with pytest.raises(ValueError):
        frontier.apgr([1.5], [0.6], Q_S, Q_L)


def test_cpt_golden():
    # CPT(50%): first crossing on (0,0)-(0.2,.5): 0.2 * (.5 - 0) / (.5 - 0) = 0.2
    assert frontier.cpt(COSTS, QUALS, Q_S, Q_L, 0.5) == pytest.approx(0.2)
    # CPT(60%): on (0.2,.5)-(0.4,.7): 0.2 + 0.2 * (.6 - .5) / (.7 - .5) = 0.3
    assert frontier.cpt(COSTS, QUALS, Q_S, Q_L, 0.6) == pytest.approx(0.3)
    # CPT(80%): on (0.4,.7)-(0.8,.9): 0.4 + 0.4 * (.8 - .7) / (.9 - .7) = 0.6
    assert frontier.cpt(COSTS, QUALS, Q_S, Q_L, 0.8) == pytest.approx(0.6)
    # Equals RouteLLM's np.interp(target quality, qualities, shares) on a rising curve.
    c, q = [0, 0.2, 0.4, 0.8, 1], [0.5, 0.70, 0.78, 0.86, 0.9]
    assert frontier.cpt(COSTS, QUALS, Q_S, Q_L, 0.8) == pytest.approx(np.interp(0.82, q, c))
    # Unanchored and never reaching 95%: NaN; already above 40% at the first point: its cost.
    assert math.isnan(frontier.cpt(COSTS, QUALS, Q_S, Q_L, 0.95, anchor=False))
    assert frontier.cpt(COSTS, QUALS, Q_S, Q_L, 0.4, anchor=False) == pytest.approx(0.2)


def test_cpt_first_crossing_on_non_monotone_curve():
    # PGR at 0.2, 0.4, 0.6: 0.6, 0.3, 0.9 -> 50% is first reached on (0,0)-(0.2,.6): 0.2*.5/.6
    q = [Q_S + 0.4 * p for p in (0.6, 0.3, 0.9)]
    assert frontier.cpt([0.2, 0.4, 0.6], q, Q_S, Q_L, 0.5) == pytest.approx(0.2 * 0.5 / 0.6)


def test_pareto_frontier():
    costs = [0.1, 0.2, 0.3, 0.3, 0.5, NAN, 0.05]
    quals = [0.5, 0.4, 0.6, 0.55, 0.6, 0.99, 0.3]
    # 1 is dominated by 0 (cheaper, better); 3 by 2 (same cost, better); 4 by 2 (cheaper, equal);
    # 5 is NaN; 6 is the cheapest, so nothing dominates it.
    assert frontier.pareto_frontier(costs, quals) == [6, 0, 2]
    assert frontier.pareto_frontier([0.2, 0.2], [0.5, 0.5]) == [0, 1]  # ties dominate nothing
    assert frontier.pareto_frontier([], []) == []


def test_quality_curve_sorted():
    assert frontier.quality_curve(COSTS, QUALS) == ([0.2, 0.4, 0.8], [0.70, 0.78, 0.86])


def test_nondecreasing_convex_hull():
    costs, quals = [0, 0.5, 0.25, 1, 0.8], [0.5, 0.6, 0.4, 0.9, 0.95]
    # Upper hull: (0,.5) (.8,.95) (1,.9) — (.25,.4) and (.5,.6) lie below the chord (0,.5)-(.8,.95)
    # (at .5 the chord is .5 + .45*.5/.8 = .78 > .6); cut at the best vertex (.8,.95).
    assert frontier.nondecreasing_convex_hull(costs, quals) == ([0, 0.8], [0.5, 0.95])


def test_aiq_golden():
    costs, quals = [0, 0.5, 0.25, 1, 0.8], [0.5, 0.6, 0.4, 0.9, 0.95]
    # Hull (0,.5)-(.8,.95), flat at .95 to 1: 0.8*(.5+.95)/2 + 0.2*.95 = .58 + .19 = 0.77
    assert frontier.aiq(costs, quals) == pytest.approx(0.77)
    # Two points (0,.5) (1,.9): (.5 + .9) / 2 = 0.7
    assert frontier.aiq([0, 1], [0.5, 0.9]) == pytest.approx(0.7)
    # Hull peaks inside the range: (0,.5)-(.5,.9) then flat: .5*1.4/2 + .5*.9 = .35 + .45 = 0.8
    assert frontier.aiq([0, 0.5, 1], [0.5, 0.9, 0.7]) == pytest.approx(0.8)
    # A range narrower than the points: over [0, .5] of that hull: (.5 + .9)/2 = 0.7
    assert frontier.aiq([0, 0.5, 1], [0.5, 0.9, 0.7], (0.0, 0.5)) == pytest.approx(0.7)


def test_aiq_edge_cases():
    assert math.isnan(frontier.aiq([], []))
    assert math.isnan(frontier.aiq([0.3], [0.6]))  # zero cost range
    with pytest.raises(ValueError, match="below the cheapest point"):
        frontier.aiq([0.2, 1.0], [0.5, 0.9], (0.0, 1.0))


def test_ratio_ci_resamples_like_bootstrap_ci():
    """With every denominator 1 the ratio of sums is the mean: the same draws, the same CI."""
    x = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0]
    assert metrics.ratio_ci(x, [1.0] * len(x)) == pytest.approx(metrics.bootstrap_ci(x))
    lo, hi = metrics.ratio_ci([10, 30], [1, 2])
    assert 10 <= lo <= hi <= 15  # each resample's sum(num) / sum(den) lies within these
    assert all(math.isnan(v) for v in metrics.ratio_ci([], []))


def test_throughput_is_the_largest_batch_sizes():
    """A run grown at B = 1 and then at B = 16 reports its B = 16 rate (what other batched rows
    compare with); a killed session with no example, or no wall time, counts for nothing."""
    from harness.metrics.quality import throughput

    sessions = [
        {"batch": 1, "examples": 100, "tokens": 30000, "wall_s": 3000.0},
        {"batch": 16, "examples": 100, "tokens": 40000, "wall_s": 1000.0},
        {"batch": 16, "examples": 0, "tokens": 0, "wall_s": 50.0},  # killed before an example
        {"batch": 16, "started": "killed before its first save"},
    ]
    t = throughput({"sessions": sessions})
    assert t["batch"] == 16 and t["throughput_tok_per_s"] == 40.0
    assert t["examples_per_hour"] == 360.0 and t["throughput_modeled"] is False
    alone = throughput({"sessions": sessions[:1]})
    assert alone["batch"] == 1 and alone["throughput_tok_per_s"] == 10.0
    assert math.isnan(throughput({})["throughput_tok_per_s"])
