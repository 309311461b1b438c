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


def test_learned_report_reads_each_training_folder(tmp_path, capsys):
    """benchmarks/learned_report.py: one AUC row per training folder with a metrics.json, its
    intervals and disagreement counts from the file; overhead where overhead.json is there."""
    from benchmarks import learned_report

    metrics = {
        "rows": 100, "examples": 5, "large_needed": 8, "target": "oracle",
        "inputs": ["dist", "hidden", "token"],
        "auc": {k: {"value": v, "ci95": [v - 0.05, v + 0.05]}
                for k, v in (("learned", 0.9), ("entropy", 0.85), ("confidence", 0.87))},
        "auc_difference": {"learned-entropy": {"value": 0.05, "ci95": [0.01, 0.09]},
                           "learned-confidence": {"value": 0.03, "ci95": [-0.01, 0.07]}},
        "recall_at_share": {"0.2": {"learned": 0.75, "entropy": 0.5, "confidence": 0.625}},
        "disagreements": {"0.2": {"entropy": {"only_first": {"rows": 4, "large_needed": 0.5},
                                              "only_other": {"rows": 4, "large_needed": 0.25},
                                              "both": 16}}},
    }  # fmt: skip
    for name in ("gsm8k", "gsm8k-dist"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps(metrics))
    (tmp_path / "gsm8k" / "overhead.json").write_text(json.dumps({
        "threads": 2, "tokens": 10, "rounds": 3, "ratio_to_small": {"learned": 1.1},
        "ms_per_token": {"small": 10.0, "entropy": 10.5, "learned": 11.0}}))  # fmt: skip
    assert learned_report.main([str(tmp_path), "--md", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert text == capsys.readouterr().out
    assert (
        text.count("| oracle | dist,hidden,token | 5 | 100 | 0.080 | 0.900 [0.850, 0.950] |") == 2
    )
    assert "| +0.050 [+0.010, +0.090] | +0.030 [-0.010, +0.070] |" in text
    assert "| gsm8k | 0.2 | entropy | 4 | 2 (0.500) | 1 (0.250) | 16 |" in text
    assert "| gsm8k | 2 | 10 x 3 | 10.0 | 10.5 | 11.0 | 1.100 |" in text
    assert "| gsm8k-dist | 2 |" not in text
