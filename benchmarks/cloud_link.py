"""The cloud link measured: large served by llama-server behind a local proxy that adds a network
round trip and faults; small local on llama.cpp; routers run by `hybridbench run`'s own code.

    flock /tmp/hybridbench-heavy.lock python -m benchmarks.cloud_link --limit 50 --threads 2 \\
        --out runs/cloud-link
    python -m benchmarks.cloud_link --report runs/cloud-link      # the figures again, no decoding

The server decodes one sequence at a time (`-np 1`), the client one generation at a time
(`--batch 1`). For each router (random p = 0.2; entropy at a 20% target share, calibrated by the
published gsm8k edition's file) on the first `--limit` gsm8k test examples, four run folders:

- `free-0ms`: no faults, no added delay: the reference records;
- `faults-0ms`: through faults, chosen per HTTP request from its index (a seeded draw): 3% answered
  503, 2% answered 500, 2% connections dropped unanswered, 2% answers cut half-way, 0.5% answered
  only after the client's per-attempt timeout (the server did the work); and one outage,
  `--outage` consecutive requests answered 503, longer than the client's retries, so that the
  example in flight fails and is decoded again when the run resumes (the benchmark resumes the
  run until every example is scored);
- `free-10ms`, `free-30ms`: no faults, the proxy waits 10 or 30 ms before each request: a round
  trip.

Checked, per faulted and delayed run: as many records as examples, no example id twice, no
example failed at the end, and each record equal to the reference's (completion, token ids, which
model wrote each token, the steps and the forward passes; timings aside). Measured: wall seconds of
each run (decoding only: the models are loaded once), the client's HTTP requests and attempts
(retries included) and the round trips per generated token; against the cost model's network term
(`harness.metrics.costmodel.modeled_seconds`: one round trip per forward pass of the remote
large model), the added wall time at 10 and 30 ms over the 0 ms run; and, example by example
against the 0 ms run (the same tokens and passes), the added decoding seconds and the added
seconds per large forward pass, each with its 95% bootstrap interval over examples.

Writes OUT/cloud-link.json (every figure) and prints the tables; each run folder resumes, so the
same command continues an interrupted measurement (a run's wall time then counts only the
invocation that finished it, and is marked so).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.remote_check import start_server  # noqa: E402

ROUTERS = {
    "random": ["p=0.2"],
    "entropy": ["target_share=0.2", "calibration=results/edition2/calibration/gsm8k/entropy.json"],
}
FAULT_RATES = (("503", 0.03), ("500", 0.02), ("drop", 0.02), ("cut", 0.02), ("stall", 0.005))
TIMEOUT_S = 4.0  # the client's per-attempt timeout here; a stall waits longer than this
STALL_S = TIMEOUT_S + 2.0
SAME = ("example_id", "completion", "scores", "error")
SAME_GEN = ("token_ids", "text", "provenance", "stop_reason", "n_prompt_tokens", "query_route")
SAME_STEPS = ("drafted", "kept", "large_tokens", "large_called")
SAME_FORWARDS = ("model", "phase", "tokens_in", "cache_len")


def fault_plan(seed: int, outage_at: int, outage: int):
    """Request index -> the fault the proxy applies: a seeded draw per index, and `outage`
    consecutive 503 answers from request `outage_at` on."""

    def plan(i: int) -> str:
        if outage_at <= i < outage_at + outage:
            return "503"
        u, edge = random.Random(f"{seed}:{i}").random(), 0.0
        for fault, rate in FAULT_RATES:
            edge += rate
            if u < edge:
                return f"late:{STALL_S}" if fault == "stall" else fault
        return "ok"

    return plan


def comparable(record: dict) -> dict:
    """What two runs of the same examples must agree on: everything but the clocks."""
    g = record["generation"]
    return {
        **{k: record.get(k) for k in SAME},
        **{k: g.get(k) for k in SAME_GEN},
        "steps": {k: g["steps"].get(k) for k in SAME_STEPS},
        "forwards": {k: g["forwards"].get(k) for k in SAME_FORWARDS},
    }


def check(reference: list[dict], run: list[dict], n: int) -> dict:
    """Nothing lost, nothing duplicated, nothing failed, every record the reference's."""
    ids = [r["example_id"] for r in run]
    ref = {r["example_id"]: comparable(r) for r in reference}
    differ = [r["example_id"] for r in run if ref.get(r["example_id"]) != comparable(r)]
    first = None
    if differ:
        a, b = ref.get(differ[0]), comparable(next(r for r in run if r["example_id"] == differ[0]))
        if a and b:
            ta, tb = a["token_ids"], b["token_ids"]
            first = next(
                (i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y),
                min(len(ta), len(tb)),
            )
    return {
        "records": len(run),
        "expected": n,
        "duplicated": len(ids) - len(set(ids)),
        "failed": sum(1 for r in run if r.get("error")),
        "differ_from_reference": differ,
        "first_differing_token": first,
        "ok": len(run) == n == len(set(ids))
        and not differ
        and not any(r.get("error") for r in run),
    }


def token_figures(records: list[dict]) -> dict:
    """Generated tokens, large's tokens and large's forward passes (the round trips the cost model
    charges) over a run's records."""
    records = [r for r in records if not r.get("error")]
    tokens = sum(len(r["generation"]["token_ids"]) for r in records)
    large = sum(sum(r["generation"]["steps"]["large_tokens"]) for r in records)
    fwd = sum(m == "large" for r in records for m in r["generation"]["forwards"]["model"])
    return {"tokens": tokens, "large_tokens": large, "large_forwards": fwd}


def read_records(folder: Path) -> list[dict]:
    from harness.core.run_folder import RunFolder

    return RunFolder(folder).lines()


def run_once(engine, proxy_url: str, name: str, router_args: list[str], folder: Path, a) -> int:
    """One invocation of `hybridbench run` on the loaded engine; its exit status."""
    from harness.evaluation.runner import evaluate
    from harness.evaluation.spec import RunSpec
    from routers import parse_args

    spec = RunSpec(
        task="gsm8k",
        split="test",
        limit=a.limit,
        router=name,
        router_args=parse_args(router_args),
        large=proxy_url,
        backend="llama.cpp",
        threads=a.threads,
        batch="1",
        out=folder,
    )
    return 0 if evaluate(spec, engine).n_failed == 0 else 1


def measure(engine, server_port: int, name: str, condition: str, a) -> dict:
    """One run folder decoded to the end through the proxy for `condition`; its figures."""
    from tests.faultproxy import FaultProxy

    large = engine.backends["large"]
    folder = Path(a.out) / name / condition
    rtt = float(condition.split("-")[1].removesuffix("ms")) / 1000
    plan = fault_plan(a.seed, a.outage_at, a.outage) if condition.startswith("faults") else None
    stats0 = asdict(large.stats)
    held_before = len(read_records(folder))  # resumed from an earlier invocation of this benchmark
    attempts, walls, faults = [], [], {}
    sent = 0  # requests the proxy saw in earlier invocations: the plan's indices go on from there
    for _ in range(a.max_invocations):
        shifted = (lambda i, at=sent: plan(i + at)) if plan else None
        with FaultProxy(server_port, plan=shifted, rtt=rtt, port=a.proxy_port) as proxy:
            large._close()  # no keep-alive connection to a proxy that is gone
            t0 = time.perf_counter()
            rc = run_once(
                engine, f"http://127.0.0.1:{a.proxy_port}", name, ROUTERS[name], folder, a
            )
            walls.append(time.perf_counter() - t0)
            sent += len(proxy.seen)
            for f in proxy.seen:
                key = "stall" if f.startswith(("late", "delay")) else f
                faults[key] = faults.get(key, 0) + 1
        attempts.append(rc)
        if rc == 0:
            break
    stats1 = asdict(large.stats)
    delta = {k: stats1[k] - stats0[k] for k in stats0 if isinstance(stats0[k], int | float)}
    delta["errors"] = len(stats1["errors"]) - len(stats0["errors"])
    figures = token_figures(read_records(folder))
    return {
        "router": name,
        "condition": condition,
        "rtt_s": rtt,
        "fault_seed": a.seed if plan else None,
        "outage": a.outage if plan else 0,
        "invocations": len(attempts),
        "exit_codes": attempts,
        "wall_s": sum(walls),
        "complete_here": held_before == 0,  # else its wall time is only part of the run's
        "proxy_requests": sum(faults.values()),
        "faults": faults,
        "client": delta,
        **figures,
        "requests_per_token": delta["requests"] / max(1, figures["tokens"]),
        "attempts_per_token": delta["round_trips"] / max(1, figures["tokens"]),
        "large_forwards_per_token": figures["large_forwards"] / max(1, figures["tokens"]),
    }


def model_seconds(record: dict, model: str) -> tuple[float, int]:
    """Seconds in one model's forward passes of a record (large's: its HTTP requests, round trip
    included) and how many passes."""
    f = record["generation"]["forwards"]
    t = [s for m, s in zip(f["model"], f["seconds"], strict=True) if m == model]
    return sum(t), len(t)


def paired_added(base: list[dict], run: list[dict]) -> dict:
    """What a round trip added, example by example against the same examples at 0 ms (the same
    tokens and forward passes: each record equals its reference): decoding seconds in all (sum
    over examples) and seconds per large forward pass, each with its 95% bootstrap interval
    over examples. Runs minutes apart on a shared machine differ in speed by a few percent, as
    much as a round trip of a few ms adds to a pass; small's passes, which no round trip
    touches, measure that drift (`small_drift`: their seconds in this run over the 0 ms run's),
    and the adjusted figure charges large's 0 ms passes the same drift before subtracting."""
    import numpy as np

    from harness.metrics.quality import bootstrap_ci, bootstrap_statistic

    ref = {r["example_id"]: r for r in base}
    cols = []  # per example: decoding s, large s, small s (this run, then 0 ms), large passes
    for r in run:
        o = ref[r["example_id"]]
        (lr, n), (lb, _) = model_seconds(r, "large"), model_seconds(o, "large")
        sr, sb = model_seconds(r, "small")[0], model_seconds(o, "small")[0]
        cols.append((r["generation"]["seconds"] - o["generation"]["seconds"], lr, lb, sr, sb, n))
    wall, lr, lb, sr, sb, n = np.array(cols, dtype=float).T
    k = len(wall)

    def per_pass(idx, adjust: bool):
        drift = sr[idx].sum(-1) / sb[idx].sum(-1) if adjust else 1.0
        return 1000 * (lr[idx].sum(-1) - drift * lb[idx].sum(-1)) / n[idx].sum(-1)

    every = np.arange(k)[None]
    lo, hi = bootstrap_ci(wall)
    return {
        "examples": k,
        "added_decode_s": float(wall.sum()),
        "added_decode_ci_s": [lo * k, hi * k],
        "added_per_large_forward_ms": float(per_pass(every, False)[0]),
        "added_per_large_forward_ci_ms": list(bootstrap_statistic(k, lambda i: per_pass(i, False))),
        "small_drift": float(sr.sum() / sb.sum()),
        "adjusted_per_large_forward_ms": float(per_pass(every, True)[0]),
        "adjusted_per_large_forward_ci_ms": list(
            bootstrap_statistic(k, lambda i: per_pass(i, True))
        ),
    }


def summarize(rows: list[dict], out: Path) -> dict:
    """The checks against each router's reference run and the network term against the cost
    model's; written to OUT/cloud-link.json."""
    by = {(r["router"], r["condition"]): r for r in rows}
    for r in rows:
        ref = read_records(out / r["router"] / "free-0ms")
        mine = read_records(out / r["router"] / r["condition"])
        r["check"] = check(ref, mine, r["expected_n"])
        base = by.get((r["router"], "free-0ms"))
        if r["condition"].startswith("free") and base and r["rtt_s"] > 0:
            r["added_wall_s"] = r["wall_s"] - base["wall_s"]
            r["cost_model_network_s"] = r["large_forwards"] * r["rtt_s"]
            r["requests_times_rtt_s"] = r["client"]["requests"] * r["rtt_s"]
            r["added_http_s"] = r["client"]["seconds"] - base["client"]["seconds"]
            r["paired"] = paired_added(ref, mine)
    result = {"rows": rows, "fault_rates": dict(FAULT_RATES), "timeout_s": TIMEOUT_S}
    (out / "cloud-link.json").write_text(json.dumps(result, indent=1))
    return result


def tables(result: dict) -> str:
    rows = result["rows"]
    out = ["| router | run | records | duplicated | failed | equal to the fault-free run | "
           "invocations | faults injected | HTTP attempts (retries) |",
           "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        c = r["check"]
        faults = ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items()) if k != "ok")
        eq = f"{c['records'] - len(c['differ_from_reference'])}/{c['records']}"
        run = r["condition"] + (f" (outage {r['outage']})" if r.get("outage") else "")
        out.append(f"| {r['router']} | {run} | {c['records']}/{c['expected']} | "
                   f"{c['duplicated']} | {c['failed']} | {eq} | {r['invocations']} | "
                   f"{faults or '—'} | {r['client']['round_trips']} ({r['client']['retries']}) |")  # fmt: skip
    out += ["", "| router | run | tokens | large share | large forwards / token | HTTP requests / "
            "token | wall s | in HTTP calls, s | added over 0 ms: wall, s | in HTTP calls, s | "
            "cost model's network term, s | requests × RTT, s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if not r["condition"].startswith("free"):
            continue
        add = r.get("added_wall_s")
        cells = (f"{add:.1f}", f"{r['added_http_s']:.1f}", f"{r['cost_model_network_s']:.1f}",
                 f"{r['requests_times_rtt_s']:.1f}") if add is not None else ("—",) * 4  # fmt: skip
        wall = f"{r['wall_s']:.1f}" + ("" if r["complete_here"] else " (part)")
        out.append(f"| {r['router']} | {r['condition']} | {r['tokens']} | "
                   f"{r['large_tokens'] / max(1, r['tokens']):.3f} | "
                   f"{r['large_forwards_per_token']:.3f} | {r['requests_per_token']:.3f} | "
                   f"{wall} | {r['client']['seconds']:.1f} | {' | '.join(cells)} |")  # fmt: skip
    out += ["", "| router | round trip, ms | examples (paired with 0 ms) | added decoding, s [95% "
            "CI] | cost model's network term, s | added per large forward pass, ms [95% CI] | "
            "small's passes, × 0 ms run | added per large pass, drift-adjusted, ms [95% CI] |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "paired" not in r:
            continue
        d = r["paired"]
        lo, hi = d["added_decode_ci_s"]
        plo, phi = d["added_per_large_forward_ci_ms"]
        alo, ahi = d["adjusted_per_large_forward_ci_ms"]
        out.append(f"| {r['router']} | {1000 * r['rtt_s']:g} | {d['examples']} | "
                   f"{d['added_decode_s']:.1f} [{lo:.1f}, {hi:.1f}] | "
                   f"{r['cost_model_network_s']:.1f} | {d['added_per_large_forward_ms']:.2f} "
                   f"[{plo:.2f}, {phi:.2f}] | {d['small_drift']:.3f} | "
                   f"{d['adjusted_per_large_forward_ms']:.2f} [{alo:.2f}, {ahi:.2f}] |")  # fmt: skip
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=50, help="first N gsm8k test examples")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/cloud-link")
    ap.add_argument("--routers", nargs="+", default=list(ROUTERS), choices=list(ROUTERS))
    ap.add_argument("--conditions", nargs="+",
                    default=["free-0ms", "faults-0ms", "free-30ms", "free-10ms"])  # fmt: skip
    ap.add_argument("--seed", type=int, default=0, help="the fault draw's seed")
    ap.add_argument("--outage-at", type=int, default=400, help="request index the outage starts at")
    ap.add_argument("--outage", type=int, default=8, help="consecutive 503s (> retries + 1)")
    ap.add_argument("--max-invocations", type=int, default=4)
    ap.add_argument("--proxy-port", type=int, default=18431, help="fixed: a run's identity has it")
    ap.add_argument("--server-bin", default=None)
    ap.add_argument("--report", metavar="OUT", default=None, help="print OUT's tables and stop")
    a = ap.parse_args()
    if a.report:  # the figures again from the run folders, no decoding
        rows = json.loads((Path(a.report) / "rows.json").read_text())
        print(tables(summarize(rows, Path(a.report))))
        return 0

    from harness.backends import models
    from harness.backends.engine import Engine, load_backend
    from harness.backends.remote import RemoteBackend, RemoteConfig, remote_info

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gguf = str(models.assemble_gguf(models.DEFAULT_LARGE))
    binary = a.server_bin or str(models.cache_dir() / "bin" / "llama-server")
    proc, port = start_server(binary, gguf, a.threads, out / "llama-server.log")
    rows_path = out / "rows.json"
    rows = json.loads(rows_path.read_text()) if rows_path.is_file() else []
    try:
        small, tokenizer = load_backend(models.DEFAULT_SMALL, "small", "llama.cpp", "auto",
                                        "bfloat16", a.threads, None, 1)  # fmt: skip
        url = f"http://127.0.0.1:{a.proxy_port}"
        cfg = RemoteConfig(url, timeout_s=TIMEOUT_S, retries=4, deadline_s=60.0)
        large = RemoteBackend(cfg, vocab_size=small.n_vocab)
        engine = Engine(tokenizer, {"small": small, "large": large})
        engine.batch, engine.batch_probe = 1, None
        from tests.faultproxy import FaultProxy

        with FaultProxy(port, port=a.proxy_port):
            large.info = remote_info(large)
        large._close()
        for condition in a.conditions:  # both routers' reference runs first
            for name in a.routers:
                if any(r["router"] == name and r["condition"] == condition for r in rows):
                    continue
                print(f"== {name} {condition}", file=sys.stderr, flush=True)
                row = measure(engine, port, name, condition, a)
                row["expected_n"] = a.limit
                rows.append(row)
                rows_path.write_text(json.dumps(rows, indent=1))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(tables(summarize(rows, out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
