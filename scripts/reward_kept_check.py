"""Do a reward run's scores at run time agree with the calibration's? Scores the final text of a
reward row's answers again offline, in one pass (`harness.training.calibrate.backend_scores`, the path
`hybridbench calibrate` takes), and counts the tokens the router kept (small's, provenance 0)
that score below the run's threshold: each was scored >= threshold while decoding, so any count
above 0 means the two paths differ (issue 13 step 4, docs/issue13-results.md, session 23).

    python scripts/reward_kept_check.py results/edition2/gsm8k/reward__target_share=0.1 --limit 8

Loads the run's pair (llama.cpp) and reward checkpoint; prints one line per answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from harness.backends.engine import engine_from_args
    from harness.backends.reward_model import reward_backend_for
    from harness.cli import main as cli
    from harness.training.calibrate import backend_scores
    from tasks import get_task

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a reward run's folder (manifest.json, records.jsonl)")
    ap.add_argument("--limit", type=int, default=8, help="its first N answers")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    m = json.loads((args.run / "manifest.json").read_text(encoding="utf-8"))
    if m["router"] != "reward":
        raise SystemExit(f"{args.run}: router {m['router']!r}, not reward")
    thr, ck = m["router_args"]["threshold"], m["router_args"]["checkpoint"]
    argv = ["calibrate", "--router", "reward", "--checkpoint", ck, "--task", m["task"],
            "--out", "/dev/null", "--backend", "llama.cpp", "--threads", str(args.threads)]  # fmt: skip
    engine = engine_from_args(cli.build_parser(argv).parse_args(argv))  # noqa
    scorer = reward_backend_for(ck, engine)
    examples = {e.id: e for e in get_task(m["task"]).split(m["split"], seed=m.get("split_seed", 0))}
    kept = below = 0
    with open(args.run / "records.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for _, line in zip(range(args.limit), f, strict=False)]
    for r in records:
        g = r["generation"]
        scores = backend_scores(scorer, engine.encode(examples[r["example_id"]].messages),
                                g["token_ids"])  # fmt: skip
        bad = [i for i, (p, s) in enumerate(zip(g["provenance"], scores, strict=True))
               if p == 0 and s < thr]  # fmt: skip
        kept += g["provenance"].count(0)
        below += len(bad)
        print(f"{r['example_id']}: {len(scores)} tokens, {sum(g['provenance'])} from large, "
              f"{len(bad)} kept below the threshold offline {bad[:3]}", flush=True)  # fmt: skip
    print(f"kept tokens {kept}, below the threshold offline {below} ({below / max(kept, 1):.4f})")


if __name__ == "__main__":
    main()
