"""Golden tests of harness.metrics.costmodel: modeled latency and dollar cost of hand-built records."""

import itertools
import math

import pytest

from harness.errors import UserError
from harness.metrics import costmodel
from harness.metrics.costmodel import HardwareProfile, PriceProfile
from tests.test_metrics import FAILED, MANIFEST, MODELS, A, B

# Round numbers so the arithmetic can be done by hand.
TOY = HardwareProfile(
    "toy",
    small_bandwidth=1000.0,
    large_bandwidth=10_000.0,
    large_remote=True,
    rtt=0.5,
    source="test",
)


def test_modeled_seconds_golden():
    # A moves small 4150 B, large 21500 B and makes 4 large forward passes (see test_metrics):
    # 4150 / 1000 + 21500 / 10000 + 4 * 0.5 = 4.15 + 2.15 + 2.0 = 8.3 s
    assert costmodel.example_modeled_seconds(A, MODELS, TOY) == pytest.approx(8.3)
    # B: small only, 2020 B: 2.02 s, no round trip
    assert costmodel.example_modeled_seconds(B, MODELS, TOY) == pytest.approx(2.02)


def test_modeled_seconds_named_profiles():
    xeon_a100 = costmodel.get_profile("seed-xeon-a100")
    # 4150 B at 204.8 GB/s + 21500 B at 2039 GB/s + 4 round trips of 30 ms
    expected = 4150 / 204.8e9 + 21500 / 2039e9 + 4 * 0.030
    assert costmodel.example_modeled_seconds(A, MODELS, xeon_a100) == pytest.approx(expected)
    # One H100 holds both: (4150 + 21500) B at 3350 GB/s, no network
    h100 = costmodel.get_profile("h100")
    assert costmodel.example_modeled_seconds(A, MODELS, h100) == pytest.approx(25650 / 3350e9)


def test_local_large_has_no_round_trips():
    local = HardwareProfile("local", 1000.0, 10_000.0, large_remote=False, rtt=0.5, source="t")
    assert costmodel.example_modeled_seconds(A, MODELS, local) == pytest.approx(6.3)  # 8.3 - 2.0


def test_modeled_latency_aggregate():
    out = costmodel.modeled_latency([A, B, FAILED], MANIFEST, TOY)
    assert out["modeled_s"] == pytest.approx(5.16)  # (8.3 + 2.02) / 2, failed record left out
    assert out["modeled_tok_per_s"] == pytest.approx(4 / 10.32)  # (3 + 1) tokens / 10.32 s
    empty = costmodel.modeled_latency([], MANIFEST, TOY)
    assert math.isnan(empty["modeled_s"]) and math.isnan(empty["modeled_tok_per_s"])


def test_dollar_cost_golden():
    # A's large passes feed tokens_in 4 + 1 + 1 + 1 = 7 and it emits 2 large tokens.
    assert costmodel.large_token_counts(A) == (7, 2)
    # Re-sending the context adds cache_len 0 + 4 + 5 + 6 = 15: 22 input tokens.
    assert costmodel.large_token_counts(A, resend_context=True) == (22, 2)
    price = PriceProfile("test", usd_per_m_input=2.0, usd_per_m_output=10.0)
    assert costmodel.example_cost_usd(A, price) == pytest.approx(34e-6)  # (7*2 + 2*10) / 1e6
    stateless = PriceProfile("test", 2.0, 10.0, resend_context=True)
    assert costmodel.example_cost_usd(A, stateless) == pytest.approx(64e-6)  # (22*2 + 2*10) / 1e6
    assert costmodel.cost_per_example([A, B, FAILED], price) == pytest.approx(17e-6)  # (34 + 0)/2
    assert math.isnan(costmodel.cost_per_example([], price))


def test_measure_bandwidth_with_injected_timer():
    ticks = itertools.count(step=0.25)  # every timed copy takes 0.25 s
    bw = costmodel.measure_bandwidth(nbytes=8 * 2**20, repeats=3, timer=lambda: next(ticks))
    assert bw == pytest.approx(2 * 8 * 2**20 / 0.25)  # read + write of 8 MiB in 0.25 s


def test_this_machine_profile():
    given = costmodel.this_machine_profile(bandwidth=20e9)
    assert given.small_bandwidth == given.large_bandwidth == 20e9 and not given.large_remote
    measured = costmodel.get_profile("this-machine")  # runs the real probe (~1 s)
    assert measured.small_bandwidth > 1e8  # any real machine copies faster than 100 MB/s


def test_unknown_profile_lists_valid_names():
    with pytest.raises(UserError, match="seed-xeon-a100, h100, this-machine"):
        costmodel.get_profile("tpu")


def _passes():
    P = costmodel.PassRecord
    return [
        P("small", 3, 9, True, 0.030),
        P("large", 3, 9, True, 0.050),
        *[P("small", 3, 1, False, 0.0021 + i * 1e-4) for i in range(8)],
        P("large", 1, 5, False, 0.012),
        P("large", 2, 3, False, 0.011),
        P("large", 2, 40, False, 0.090),
    ]


def test_step_priced_seconds_prices_every_decode_pass_at_the_step():
    # prefills at their measured 0.08 s; 8 small passes at 2 ms, 3 large passes at 10 ms
    got = costmodel.step_priced_seconds(_passes(), {"small": 0.002, "large": 0.010})
    assert got == pytest.approx(0.08 + 8 * 0.002 + 3 * 0.010)
    assert math.isnan(costmodel.step_priced_seconds(_passes(), {"small": 0.002}))


def test_passes_by_size_and_feed_buckets():
    assert costmodel.passes_by_size(_passes()) == {"small": {3: 8}, "large": {1: 1, 2: 2}}
    buckets = costmodel.feed_bucket_seconds(
        _passes(), lambda n: n if n <= 1 else (8 if n <= 8 else None)
    )
    assert list(buckets["large"]) == ["8", "long"] and list(buckets["small"]) == ["1"]
    assert buckets["large"]["8"] == {"passes": 2, "median_s": pytest.approx(0.0115)}
    assert buckets["small"]["1"]["passes"] == 8
    assert buckets["small"]["1"]["median_s"] == pytest.approx(0.00245)
