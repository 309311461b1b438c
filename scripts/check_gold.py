"""Run the gold solutions of the code tasks through their own scorers, in the sandbox.

    python scripts/check_gold.py                 # MBPP gold code (500) and HumanEval canonical (164)
    python scripts/check_gold.py --task mbpp --jobs 2

Each gold solution is passed to `task.score()` as the completion, exactly as a model's reply
would be, so this checks the data, the program assembly and the sandbox together. Expected:
mbpp 500/500, humaneval 164/164. Exits 1 if any gold solution fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from tasks import get_task  # noqa: E402

TASKS = ("mbpp", "humaneval")


def check(name: str, jobs: int) -> list[str]:
    """Ids of the examples whose gold solution fails; prints the pass count."""
    task = get_task(name)
    examples = task.load()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each score() waits on a subprocess
        scores = list(pool.map(lambda ex: task.score(ex, ex.reference)[task.metric], examples))
    failed = [ex.id for ex, s in zip(examples, scores, strict=True) if s != 1.0]
    seconds = time.perf_counter() - start
    print(
        f"{name}: {len(examples) - len(failed)}/{len(examples)} gold solutions pass ({seconds:.0f} s)"
    )
    if failed:
        print(f"  failed: {', '.join(failed)}")
    return failed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=TASKS, action="append", help="default: all code tasks")
    p.add_argument("--jobs", type=int, default=2, help="sandboxed programs run at once")
    args = p.parse_args()
    failed = [i for name in args.task or TASKS for i in check(name, args.jobs)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
