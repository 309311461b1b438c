"""Analysis scripts under scripts/ that read run files (no model loads)."""

from __future__ import annotations

import json
import sys


def test_calibration_loops_splits_the_pool_by_answers_cut_at_the_budget(tmp_path, capsys):
    """benchmarks/calibration_loops.py: a loop's many low scores make most of a reward calibration's
    low tail; the threshold from answers that ended by themselves defers the target share of
    those answers' tokens."""
    from benchmarks import calibration_loops as cl

    ended = [float(i) for i in range(10)]  # 0..9
    loop = [float(-i) for i in range(1, 11)]  # a budget-cut answer, every token scored low
    (tmp_path / "cal.json").write_text(json.dumps(
        {"router": "reward", "example_ids": ["a", "b"], "scores": ended + loop}))  # fmt: skip
    with open(tmp_path / "rec.jsonl", "w") as f:
        for eid, n, stop in (("a", 10, "eos"), ("b", 10, "max_tokens")):
            f.write(json.dumps({"example_id": eid, "generation": {
                "token_ids": [0] * n, "stop_reason": stop}}) + "\n")  # fmt: skip
    answers = cl.per_answer(tmp_path / "cal.json", tmp_path / "rec.jsonl")
    assert [(e, cut, len(xs)) for e, cut, xs in answers] == [("a", False, 10), ("b", True, 10)]
    assert cl.share("reward", ended, 2.0) == 0.2 and cl.share("entropy", ended, 7.0) == 0.2
    sys.argv = ["calibration_loops.py", str(tmp_path / "cal.json"), str(tmp_path / "rec.jsonl"),
                "--targets", "0.2"]  # fmt: skip
    cl.main()
    out = capsys.readouterr().out
    assert "2 answers, 1 cut at the budget holding 10 of 20 scored tokens" in out
    rows = [r for r in out.splitlines() if r.startswith("| 0.2 |")]
    # all answers: 20% of the pool is 4 tokens, all from the loop: none of the ended answer's
    assert rows[0].split("|")[4].strip() == "0.000 / 0.400"
    assert rows[1].split("|")[4].strip().startswith("0.200 / ")  # ended answers: 2 of their 10
