"""The tables of a `hybridbench bench-gpu` run (`harness.evaluation.gpu_bench`), made from its
JSON alone: `table` (every row, the cost model beside it: what docs/speed.md shows), `details`
(graphs captured, passes by feed bucket) and `progress` (the lines printed as rows finish).

    hybridbench bench-gpu --from-json docs/data/bench-gpu-h100.json
"""

from __future__ import annotations


def progress(rows) -> str:
    return "\n".join(
        f"  {r['setting']} B={r['B']} {r['config']}: {r['tok_s']} tok/s"
        + (f" (cost model {r['cost_model_tok_s']})" if "cost_model_tok_s" in r else "")
        for r in rows
    )


COLUMNS = (
    "setting",
    "B",
    "config",
    "tok_s",
    "large_token_share",
    "cost_model_tok_s",
    "measured_over_cost_model",
    "measured_over_passes",
)


def table(result: dict) -> str:
    """The rows as one markdown table (what docs/speed.md's GPU table is made from)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in result["rows"]:
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |")
    for k, v in result.items():
        if k.startswith("memory_"):
            lines.append(f"\n{k}: " + ", ".join(f"{a} {b / 2**30:.2f} GiB" for a, b in v.items()))
    return "\n".join(lines)


def details(result: dict) -> str:
    """What the captured path did, as markdown: the graphs captured before each batch size (by
    feed bucket), how long capturing took and any capture that failed, with its reason; and per
    row, each model's decode passes by feed bucket (passes x median ms), beside the cost model
    that prices every one of them at the one-token step."""
    lines = []
    for c in result.get("captures", []):
        for role, v in c.items():
            if isinstance(v, dict):
                feeds = ", ".join(
                    f"{f}: {n}"
                    for f, n in sorted(v["graphs_by_feed"].items(), key=lambda x: int(x[0]))
                )
                failed = "; ".join(v["failures"]) or "none failed"
                lines.append(
                    f"- {c['setting']} B={c['B']} {role}: graphs by feed bucket "
                    f"{feeds or 'none'}, captured in {v['capture_s']} s; {failed}"
                )
    rows = [r for r in result["rows"] if "feed_buckets" in r]
    if rows:
        lines += [
            "",
            "| setting | B | config | small passes by feed | large passes by feed |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            cells = [_feeds(r["feed_buckets"].get(m, {})) for m in ("small", "large")]
            lines.append(
                f"| {r['setting']} | {r['B']} | {r['config']} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines)


def _feeds(buckets: dict) -> str:
    return ", ".join(
        f"{b}: {v['passes']} x {v['median_s'] * 1e3:.2f} ms" for b, v in buckets.items()
    )
