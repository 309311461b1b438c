"""benchmarks/cloud_link.py's bookkeeping: the fault plan, the record check, the token counts and
the paired round-trip figures (the benchmark itself decodes real models: docs/cloud.md)."""

from __future__ import annotations

import copy

import pytest

from benchmarks.cloud_link import FAULT_RATES, check, fault_plan, paired_added, token_figures


def record(eid: str, tokens: list[int], provenance: list[int], seconds: float = 1.0) -> dict:
    return {
        "example_id": eid,
        "completion": "x",
        "scores": {"exact_match": 1.0},
        "error": "",
        "seconds": seconds,
        "generation": {
            "token_ids": tokens,
            "text": "x",
            "provenance": provenance,
            "stop_reason": "eos",
            "n_prompt_tokens": 5,
            "query_route": "",
            "seconds": seconds,
            "steps": {
                "drafted": [1] * len(tokens),
                "kept": [1 - p for p in provenance],
                "large_tokens": provenance,
                "large_called": [bool(p) for p in provenance],
                "seconds": [seconds] * len(tokens),
            },
            "forwards": {
                "model": ["small", "large"],
                "phase": ["prefill", "prefill"],
                "tokens_in": [5, 5],
                "cache_len": [0, 0],
                "seconds": [seconds, seconds],
            },
        },
    }


def test_the_fault_plan_is_a_function_of_the_request_index():
    a, b = fault_plan(0, 100, 8), fault_plan(0, 100, 8)
    draws = [a(i) for i in range(20000)]
    assert draws == [b(i) for i in range(20000)]
    assert draws[100:108] == ["503"] * 8  # the outage
    rest = draws[:100] + draws[108:]
    for fault, rate in FAULT_RATES:
        name = "late" if fault == "stall" else fault
        share = sum(d.startswith(name) for d in rest) / len(rest)
        assert abs(share - rate) < 0.006, (fault, share)
    assert [fault_plan(1, 100, 8)(i) for i in range(2000)] != draws[:2000]


def test_check_passes_equal_records_whatever_their_clocks():
    ref = [record("a", [1, 2, 3], [0, 1, 0]), record("b", [4, 5], [0, 0])]
    run = [record("b", [4, 5], [0, 0], seconds=9.0), record("a", [1, 2, 3], [0, 1, 0], 7.0)]
    c = check(ref, run, 2)
    assert c["ok"] and c["differ_from_reference"] == [] and c["duplicated"] == 0


def test_check_finds_lost_duplicated_failed_and_different_records():
    ref = [record("a", [1, 2, 3], [0, 1, 0]), record("b", [4, 5], [0, 0])]
    assert not check(ref, ref[:1], 2)["ok"]  # lost
    dup = check(ref, [ref[0], ref[1], copy.deepcopy(ref[1])], 2)
    assert dup["duplicated"] == 1 and not dup["ok"]
    failed = copy.deepcopy(ref[1])
    failed["error"] = "RemoteError: gave up"
    f = check(ref, [ref[0], failed], 2)
    assert f["failed"] == 1 and not f["ok"]
    other = record("a", [1, 9, 3], [0, 1, 0])
    d = check(ref, [other, ref[1]], 2)
    assert d["differ_from_reference"] == ["a"] and d["first_differing_token"] == 1
    routed = record("a", [1, 2, 3], [0, 0, 1])  # same tokens, another model wrote them
    assert check(ref, [routed, ref[1]], 2)["differ_from_reference"] == ["a"]


def test_token_figures_count_large_forwards_and_skip_failed_records():
    failed = {"example_id": "c", "error": "RemoteError", "generation": {}}
    f = token_figures([record("a", [1, 2, 3], [0, 1, 0]), failed])
    assert f == {"tokens": 3, "large_tokens": 1, "large_forwards": 1}


def test_paired_added_compares_each_example_with_itself_at_0_ms():
    base = [record("a", [1, 2], [0, 1], seconds=1.0), record("b", [3], [1], seconds=2.0)]
    slow = [record("b", [3], [1], seconds=2.5), record("a", [1, 2], [0, 1], seconds=1.5)]
    for r in slow:  # only large's passes took longer: 10 ms more each
        f = r["generation"]["forwards"]
        f["seconds"] = [s - 0.5 + (0.01 if m == "large" else 0) for m, s in
                        zip(f["model"], f["seconds"], strict=True)]  # fmt: skip
    d = paired_added(base, slow)
    assert d["examples"] == 2 and d["added_decode_s"] == pytest.approx(1.0)
    assert d["added_per_large_forward_ms"] == pytest.approx(10.0)
    lo, hi = d["added_per_large_forward_ci_ms"]
    assert lo == pytest.approx(10.0) and hi == pytest.approx(10.0)  # the same for every example
    assert d["added_decode_ci_s"] == pytest.approx([1.0, 1.0])
    assert d["small_drift"] == pytest.approx(1.0)
    assert d["adjusted_per_large_forward_ms"] == pytest.approx(10.0)


def test_paired_added_scales_the_machine_drift_out_of_large_passes():
    base = [record("a", [1, 2], [0, 1], seconds=1.0), record("b", [3], [1], seconds=2.0)]
    slower = copy.deepcopy(
        base
    )  # a machine 10% slower: both models' passes, plus 20 ms a round trip
    for r in slower:
        f = r["generation"]["forwards"]
        f["seconds"] = [1.1 * s + (0.02 if m == "large" else 0) for m, s in
                        zip(f["model"], f["seconds"], strict=True)]  # fmt: skip
    d = paired_added(base, slower)
    assert d["small_drift"] == pytest.approx(1.1)
    assert d["added_per_large_forward_ms"] == pytest.approx(170.0)  # 10% of 1.5 s a pass, + 20
    assert d["adjusted_per_large_forward_ms"] == pytest.approx(20.0)
    lo, hi = d["adjusted_per_large_forward_ci_ms"]
    assert lo == pytest.approx(20.0) and hi == pytest.approx(20.0)
