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


def test_heldout_report_reads_each_training_folder(tmp_path, capsys):
    """benchmarks/heldout_report.py: one AUC row per training folder with a metrics.json, its
    intervals and disagreement counts from the file; overhead where overhead.json is there."""
    from benchmarks import heldout_report

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
    assert heldout_report.main([str(tmp_path), "--md", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert text == capsys.readouterr().out
    assert (
        text.count("| oracle | dist,hidden,token | 5 | 100 | 0.080 | 0.900 [0.850, 0.950] |") == 2
    )
    assert "| +0.050 [+0.010, +0.090] | +0.030 [-0.010, +0.070] |" in text
    assert "| gsm8k | 0.2 | entropy | 4 | 2 (0.500) | 1 (0.250) | 16 |" in text
    assert "| gsm8k | 2 | 10 x 3 | 10.0 | 10.5 | 11.0 | 1.100 |" in text
    assert "| gsm8k-dist | 2 |" not in text


def test_heldout_report_of_r2r_reads_its_labels_and_its_scores_on_the_critical_labels(tmp_path):
    """An r2r training folder (its own scorer key, fixed inputs), an every-divergence ablation
    scored on the critical labels (`on_critical`), the labels counted from rollouts.jsonl (the
    last line of an example counts) and the critical-only oracle's held-out share."""
    from benchmarks import heldout_report

    def scored(router, auc):
        return {
            "rows": 50, "examples": 4, "large_needed": 5,
            "auc": {k: {"value": v, "ci95": [v - 0.1, v + 0.1]}
                    for k, v in ((router, auc), ("entropy", 0.8), ("confidence", 0.7))},
            "auc_difference": {f"{router}-entropy": {"value": auc - 0.8, "ci95": [-0.2, 0.1]},
                               f"{router}-confidence": {"value": auc - 0.7, "ci95": [-0.1, 0.2]}},
            "recall_at_share": {"0.1": {router: 0.4, "entropy": 0.6, "confidence": 0.2}},
            "disagreements": {},
        }  # fmt: skip

    held = {"examples": 4, "tokens": 60, "divergences": 6, "rolled_out": 4, "critical": 1,
            "critical_share": 0.25, "critical_token_share": 0.025}  # fmt: skip
    folders = {
        "gsm8k": scored("r2r", 0.75) | {"target": "critical", "heldout_labels": held},
        "gsm8k-every": scored("r2r", 0.9) | {"target": "oracle", "on_critical": scored("r2r", 0.6)},
        "gsm8k-learned": scored("learned", 0.85) | {"target": "citer", "inputs": ["dist"]},
    }
    for name, m in folders.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps(m))
    (tmp_path / "labels-gsm8k").mkdir()
    rollouts = [
        {"schema": "hybridbench.critical_rollouts/1"},
        {"id": "a", "answer": [1, 2, 3], "divergences": 9, "rolled": []},  # written again below
        {"id": "a", "answer": [1, 2, 3, 4], "divergences": 2, "rolled": [[1, 5, "x", 1]]},
        {"id": "b", "answer": [1] * 6, "divergences": 3, "rolled": [[0, 5, "y", 0], [2, 6, "y", 0]]},
    ]  # fmt: skip
    (tmp_path / "labels-gsm8k" / "rollouts.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rollouts)
    )
    assert heldout_report.rollout_stats(tmp_path / "labels-gsm8k" / "rollouts.jsonl") == {
        "examples": 2, "tokens": 10, "divergences": 5, "rolled_out": 3, "critical": 1,
        "critical_share": 1 / 3, "critical_token_share": 5 / 10 * (1 / 3),
    }  # fmt: skip
    text = "\n".join(heldout_report.report(tmp_path))
    assert (
        "| gsm8k | critical | top100,hidden,token | 4 | 50 | 0.100 | 0.750 [0.650, 0.850] |" in text
    )
    assert "| gsm8k-learned | citer | dist | 4 | 50 |" in text
    assert "| gsm8k | 0.1 | 0.400 | 0.600 | 0.200 |" in text
    critical = text.split("## Trained on every divergence, scored on the critical labels")[1]
    assert "| gsm8k-every | critical | top100,hidden,token | 4 | 50 | 0.100 | 0.600 [" in critical
    assert "| gsm8k | 2 | 10 | 5 (0.500) | 3 | 1 | 0.333 | 0.1667 |" in text
    assert "| gsm8k | 4 | 60 | 6 | 4 | 1 | 0.250 | 0.0250 |" in text
