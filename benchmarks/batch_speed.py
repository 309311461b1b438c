"""Batched evaluation on the real pair: examples per hour at B = 1, 4, 8, 16 on the same gsm8k
test examples, per router, and whether the outputs equal B = 1's.

    python -m benchmarks.batch_speed --limit 16 --out runs/batch            # runs, then the table
    python -m benchmarks.batch_speed --limit 16 --out runs/batch --table    # the table only

Each cell is `hybridbench run --task gsm8k --router R --batch B --limit N` into OUT/R-bB
(resumable: an interrupted grid continues where it stopped; every run holds the heavy lock).
Throughput comes from the runs' manifests (`sessions`: emitted tokens and examples over wall
seconds, scoring included), so B = 1 and B > 1 are measured the same way, one after the other
in one invocation. Agreement: per example, the token ids of B equal B = 1's; for the others,
the first differing position and small's / large's top-2 logit margin there (`--margins`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

ROUTERS = {
    "small": [],
    "random": ["--router-arg", "p=0.2"],
    "speculative": [],
    "large": [],
}
SIZES = (1, 4, 8, 16)


def cell(out: Path, router: str, b: int) -> Path:
    return out / f"{router}-b{b}"


def run_cell(out: Path, router: str, b: int, limit: int, threads: int, lock: str) -> int:
    argv = ["hybridbench", "run", "--task", "gsm8k", "--router", router, *ROUTERS[router]]
    argv += ["--batch", str(b), "--limit", str(limit), "--backend", "llama.cpp"]
    argv += ["--threads", str(threads), "--out", str(cell(out, router, b))]
    print("==", " ".join(argv), flush=True)
    return subprocess.run(["flock", lock, *argv]).returncode


def load(path: Path) -> tuple[dict, dict, dict]:
    recs = {}
    for line in (path / "records.jsonl").read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not r.get("error"):
            recs[r["example_id"]] = r
    summary = json.loads((path / "summary.json").read_text())
    manifest = json.loads((path / "manifest.json").read_text())
    return recs, summary, manifest


def first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def table(out: Path, routers, sizes, margins: bool, threads: int) -> str:
    lines = [
        "| router | B | n | examples/hour | tok/s (all streams) | x B=1 | quality [95% CI] "
        "| large share | outputs equal to B=1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    diffs = []
    for router in routers:
        base = cell(out, router, 1)
        if not (base / "summary.json").exists():
            continue
        ref, ref_summary, _ = load(base)
        for b in sizes:
            path = cell(out, router, b)
            if not (path / "summary.json").exists():
                continue
            recs, s, _ = load(path)
            same = [k for k in recs if k in ref]
            equal = sum(
                recs[k]["generation"]["token_ids"] == ref[k]["generation"]["token_ids"]
                for k in same
            )
            for k in same:
                got, want = recs[k]["generation"]["token_ids"], ref[k]["generation"]["token_ids"]
                if got != want:
                    diffs.append((router, b, k, ref[k], first_difference(got, want)))
            ratio = s["examples_per_hour"] / ref_summary["examples_per_hour"]
            lines.append(
                f"| {router} | {b} | {s['n']} | {s['examples_per_hour']:.1f} "
                f"| {s['throughput_tok_per_s']:.1f} | {ratio:.2f} "
                f"| {s['quality']:.3f} [{s['quality_ci_low']:.3f}, {s['quality_ci_high']:.3f}] "
                f"| {s['large_token_share']:.3f} | {equal}/{len(same)} |"
            )
    text = "\n".join(lines)
    if diffs:
        text += (
            "\n\nOutputs that differ from B = 1 (first differing position; top-2 margins there):\n"
        )
        for router, b, k, rec, pos in diffs:
            extra = margin_text(rec, pos, threads) if margins else ""
            text += f"- {router} B={b} {k}: position {pos} of {len(rec['generation']['token_ids'])}{extra}\n"
    return text


def agreement(a: Path, b: Path, margins: bool, threads: int) -> str:
    """Examples of both folders whose outputs are equal; the others with their margins."""
    ra, sa, ma = load(a)
    rb, sb, mb = load(b)
    same = sorted(k for k in ra if k in rb)
    differ = [
        k for k in same if ra[k]["generation"]["token_ids"] != rb[k]["generation"]["token_ids"]
    ]
    batches = [max(int(s.get("batch", 1)) for s in m.get("sessions") or [{}]) for m in (ma, mb)]
    text = (
        f"{a} (batch {batches[0]}) vs {b} (batch {batches[1]}): outputs equal on "
        f"{len(same) - len(differ)}/{len(same)} examples "
        f"({(len(same) - len(differ)) / max(1, len(same)):.1%}); "
        f"quality {sa['quality']:.3f} vs {sb['quality']:.3f}"
    )
    for k in differ:
        pos = first_difference(rb[k]["generation"]["token_ids"], ra[k]["generation"]["token_ids"])
        extra = margin_text(ra[k], pos, threads) if margins else ""
        text += f"\n- {k}: first difference at token {pos}{extra}"
    return text


@functools.cache
def _engine(threads: int):
    from harness.backends.engine import Engine
    from tasks import get_task

    examples = {ex.id: ex for ex in get_task("gsm8k").split("test")}
    return Engine.load(backend="llama.cpp", threads=threads), examples


def margin_text(rec: dict, pos: int, threads: int) -> str:
    """small's and large's top-2 logit margin at `pos` of the B = 1 output (one-sequence pass)."""
    e, examples = _engine(threads)
    prefix = e.encode(examples[rec["example_id"]].messages) + rec["generation"]["token_ids"][:pos]
    out = []
    for role in ("small", "large"):
        b = e.backends[role]
        b.reset()
        top = b.forward(prefix, 1)[0][0].topk(2).values
        out.append(f"{role} {float(top[0] - top[1]):.4f}")
    return " — top-2 margin " + ", ".join(out)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--limit", type=int, default=16, help="gsm8k test examples per cell")
    p.add_argument("--out", default="runs/batch")
    p.add_argument("--routers", default=",".join(ROUTERS))
    p.add_argument("--sizes", default=",".join(map(str, SIZES)))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--lock", default=os.environ.get("LOCK", "/tmp/hybridbench-heavy.lock"))
    p.add_argument("--table", action="store_true", help="print the table of finished cells only")
    p.add_argument("--margins", action="store_true", help="top-2 margins where outputs differ")
    p.add_argument(
        "--pair",
        nargs=2,
        metavar=("UNBATCHED", "BATCHED"),
        help="instead: per-example agreement of two run folders of one router",
    )
    args = p.parse_args()
    if args.pair:
        print(agreement(Path(args.pair[0]), Path(args.pair[1]), args.margins, args.threads))
        return 0
    out = Path(args.out)
    routers = [r for r in args.routers.split(",") if r]
    unknown = sorted(set(routers) - set(ROUTERS))
    if unknown:
        p.error(f"unknown routers {unknown}; choose from {', '.join(ROUTERS)}")
    sizes = [int(b) for b in args.sizes.split(",")]
    if not args.table:
        for router in routers:
            for b in sizes:
                rc = run_cell(out, router, b, args.limit, args.threads, args.lock)
                if rc != 0:
                    print(f"!! {router} B={b} exited {rc}", file=sys.stderr)
    print(table(out, routers, sizes, args.margins, args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
