"""How much of a threshold router's calibration comes from answers cut at the token budget
(repetition loops), and what share its thresholds defer on other answers.

A calibration file (`hybridbench calibrate`) pools the scores of every token of small's answers;
an answer that loops to the budget holds thousands of tokens, so a few loops can make most of a
low tail. For each target share: the threshold from all calib answers (what the router uses) and
from the answers that ended by themselves, and the share each defers on a second set of answers
(`--test`: a calibration file made the same way over test answers), loops apart.

    hybridbench calibrate --router reward --checkpoint results/train13/reward/reward.pt \\
        --task gsm8k --split test --limit 40 \\
        --records reports/published/gsm8k/small__default/records.jsonl.gz --backend llama.cpp \\
        --threads 2 --out /tmp/cal-test-reward.json
    python -m benchmarks.calibration_loops results/edition2/calibration/gsm8k/reward.json \\
        results/train13/gsm8k-calib-small/records.jsonl \\
        --test /tmp/cal-test-reward.json reports/published/gsm8k/small__default/records.jsonl.gz

Reads files only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_answer(cal_path: str, records_path: str) -> list[tuple[str, bool, list[float]]]:
    """(example id, cut at the budget?, its tokens' scores) for each answer the file scored."""
    cal = json.loads(Path(cal_path).read_text(encoding="utf-8"))
    from harness.core.run_folder import records_in

    recs = {k: r["generation"] for k, r in records_in(records_path).items()}
    out, at = [], 0
    for eid in cal["example_ids"]:
        gen = recs[eid]
        n = len(gen["token_ids"])
        out.append((eid, gen["stop_reason"] == "max_tokens", cal["scores"][at : at + n]))
        at += n
    if at != len(cal["scores"]):
        raise SystemExit(f"{cal_path}: {len(cal['scores'])} scores, the records' answers hold {at}")
    return out


def pools(cal_path: str, records_path: str) -> tuple[list[float], list[float]]:
    """The scores of the answers that ended by themselves and of those cut at the budget, with
    a line saying how the file's tokens split."""
    answers = per_answer(cal_path, records_path)
    ended = [s for _, cut, xs in answers if not cut for s in xs]
    cut = [s for _, c, xs in answers if c for s in xs]
    print(f"{cal_path}: {len(answers)} answers, {sum(c for _, c, _ in answers)} cut at the "
          f"budget holding {len(cut)} of {len(cut) + len(ended)} scored tokens")  # fmt: skip
    return ended, cut


def share(router: str, scores: list[float], threshold: float) -> float:
    """The share of `scores` that `router` defers at `threshold`."""
    from routers.calibration import DEFERS_BELOW

    if not scores:
        return float("nan")
    below = DEFERS_BELOW[router]
    return sum((s < threshold) if below else (s > threshold) for s in scores) / len(scores)


def main() -> None:
    from routers.calibration import threshold_for

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("calibration", help="calibration JSON (hybridbench calibrate)")
    ap.add_argument("records", help="the records its answers came from (its --records)")
    ap.add_argument(
        "--test",
        nargs=2,
        metavar=("CALIBRATION", "RECORDS"),
        help="the same over other answers, to read each threshold's share there",
    )
    ap.add_argument("--targets", default="0.1,0.2,0.35")
    args = ap.parse_args()  # fmt: skip
    router = json.loads(Path(args.calibration).read_text(encoding="utf-8"))["router"]
    ended, cut = pools(args.calibration, args.records)
    t_ended, t_cut = pools(*args.test) if args.test else ([], [])
    head = "| target | calib answers | threshold | calib share (ended / cut) |"
    line = "|---|---|---|---|"
    if args.test:
        head += " test share (all / ended / cut) |"
        line += "---|"
    print(f"\n{head}\n{line}")
    for target in (float(t) for t in args.targets.split(",")):
        for name, pool in (("all", ended + cut), ("ended by themselves", ended)):
            thr = threshold_for(router, pool, target)  # a quantile: the pool's order is moot
            row = (f"| {target:g} | {name} | {thr:.3f} | {share(router, ended, thr):.3f} / "
                   f"{share(router, cut, thr):.3f} |")  # fmt: skip
            if args.test:
                row += (f" {share(router, t_ended + t_cut, thr):.3f} / "
                        f"{share(router, t_ended, thr):.3f} / {share(router, t_cut, thr):.3f} |")  # fmt: skip
            print(row)


if __name__ == "__main__":
    main()
