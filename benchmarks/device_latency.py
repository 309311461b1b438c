"""Measured latency of recorded rows with small on a CPU and large on a GPU.

The rows are runs made on this project's CPU machine (`runs/.../records.jsonl`); the GPU machine
that `device` lends has no model weights and cannot fetch any, so each model is rebuilt there
with random weights of its real shape (a pass costs the same whatever its weights) and every
recorded generation is decoded again through the core's own loop with the recorded steps
(`harness.evaluation.replay.replay_timed`): the same passes of the same sizes, small on the CPU, large on
the GPU, timed by the wall clock. Beside each row: its modeled latency under the cost model
(`harness.metrics.costmodel`) for this machine (the CPU's bandwidth measured by the copy probe, the GPU's
by a device copy; no network) and for the H100 datasheet.

Two engines rebuild the models:
- `--engine transformers`: each model from its config (`--save-configs`), bf16
  dense weights, eager PyTorch;
- `--engine llama.cpp`, the engine the leaderboard's rows ran on (`device_shadows.py` rebuilds
  both): each GGUF file from its
  skeleton (`--save-skeletons`: the header, i.e. metadata, tokenizer and tensor table, a few MB
  where the 0.5 + 1.1 GB files cannot travel), its tensors filled with random values in their
  own quantized types (`random_gguf`), small with `n_gpu_layers` 0 and large with all layers on
  the GPU, each in a worker process of its own (`WorkerBackend`: a CUDA llama.cpp and torch
  crashed in one process there). It needs a llama-cpp-python built with CUDA there
  (`scripts/build_llama_cpp_cuda.sh` builds one from the sdist).

    python -m benchmarks.device_latency --configs CARRY/configs --runs CARRY/small CARRY/large \
        CARRY/random --limit 8 --budget-s 420 --out $OUT/device-latency.json
    OMP_NUM_THREADS=1 python -m benchmarks.device_latency --engine llama.cpp \
        --skeletons CARRY/skeletons --runs CARRY/small CARRY/large CARRY/random --threads 8 \
        --out $OUT/device-latency-llamacpp.json

What travels there (64 MiB in all): `--pack-rows CARRY/rows --runs RUN... --limit N` copies the
runs' first N replayable examples; `--save-skeletons CARRY/skeletons`; `scripts/build_llama_cpp_cuda.sh
pack CARRY`.

With llama.cpp, OMP_NUM_THREADS=1 keeps this process's torch (the core's per-token work) on one
thread: with torch's default 16 threads beside small's 8 llama.cpp threads, small decoded 2.4x
slower than alone (docs/gpu.md).

The output (rows and their summaries) is rewritten after every example, so a run cut short by
its time limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from benchmarks.device_shadows import (
    save_configs,
    save_skeletons,
    shadow,
    shadow_llamacpp,
)

ROWS_REPLAYED = {"small", "large", "random", "entropy", "confidence", "speculative"}
EOS_PLACEHOLDER = 151645  # Qwen2.5's <|im_end|>; any id works: a pass's cost is the same


def probe(backend, threads: list[int], n: int = 200, prompt_len: int = 160) -> dict:
    """Milliseconds per one-token pass (logits of the last row back on the CPU, as the core reads
    them) after a `prompt_len`-token prompt, median of `n`, at each CPU thread count."""
    out = {}
    for t in threads:
        backend.call(op="threads", n=t)
        backend.reset()
        backend.forward([(7 * i) % 100 + 10 for i in range(prompt_len)], 1)
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            backend.forward([(13 * i) % 100 + 10], 1)
            times.append(time.perf_counter() - t0)
        out[str(t)] = 1000 * statistics.median(times)
        print(f"{backend.info.name} on {backend.info.device}, {t} threads: "
              f"{out[str(t)]:.2f} ms a token", flush=True)  # fmt: skip
    backend.call(op="threads", n=backend.threads)
    backend.reset()
    return out


def gpu_copy_bandwidth(nbytes: int = 2**30, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write, STREAM's convention)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def generate_check(backend, n_new: int, prompt_len: int = 128) -> dict:
    """Large alone through transformers' own `generate` (greedy, `n_new` tokens), eager with its
    dynamic cache and then with a static cache (which transformers compiles with torch.compile on
    a GPU): how far this engine's eager per-token cost is from what the same GPU does compiled."""
    model = backend.model
    ids = (torch.arange(prompt_len, device=model.device) % 100 + 10)[None]
    out = {}
    for name, kw in (("eager", {}), ("static_compiled", {"cache_implementation": "static"})):
        for attempt in ("warm-up", "timed"):  # the first call compiles (static) or warms up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, **kw)
            torch.cuda.synchronize()
            out[f"{name}_{attempt}_s"] = time.perf_counter() - t0
        out[f"{name}_tok_per_s"] = n_new / out[f"{name}_timed_s"]
        print(name, out, flush=True)
    return out


def machine(engine: str, threads: int, shadows: dict) -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers

    if engine == "llama.cpp":
        version = shadows["large"].version
        engine = f"llama.cpp (llama-cpp-python {version}, one process a model), GGUF quantized"
    else:
        engine = f"transformers {transformers.__version__}, eager, bf16"
    return {
        "engine": engine,
        "cpu": cpu,
        "cpu_threads": threads if "llama" in engine else torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def load_rows(runs: list[Path], limit: int) -> list[tuple[Path, dict, list[dict]]]:
    """Each run's manifest and its records of the same examples: the first `limit` that every
    run decoded without error and that ended before the token budget in every run (a loop to
    the budget in one row would weigh more than the rest together)."""
    rows = []
    for run in runs:
        from harness.core.run_folder import RunFolder

        manifest = RunFolder(run).manifest()
        if manifest["router"] not in ROWS_REPLAYED:
            raise SystemExit(f"{run}: router {manifest['router']!r} is not replayed here "
                             f"(one of {sorted(ROWS_REPLAYED)})")  # fmt: skip
        records = {}
        for r in RunFolder(run).lines():
            ok = not r.get("error") and r["generation"]["stop_reason"] != "max_tokens"
            records[r["example_id"]] = r if ok else None
        rows.append((run, manifest, records))
    first = rows[0][2]
    keep = [i for i in first if all(rec.get(i) for _, _, rec in rows)][:limit]
    return [(run, m, [rec[i] for i in keep]) for run, m, rec in rows]


def pack_rows(runs: list[Path], limit: int, dest: Path) -> None:
    """Copies of the runs holding only what a replay of `limit` examples reads (`load_rows`'
    selection, in its order): the manifest and those records. A sweep's 200-example rows are
    ~7 MB each, and what travels to the GPU machine is 64 MiB in all."""
    for run, manifest, records in load_rows(runs, limit):
        from harness.core.run_folder import RunFolder

        (dest / run.name).mkdir(parents=True, exist_ok=True)
        RunFolder(dest / run.name).write_manifest(manifest)
        RunFolder(dest / run.name).write_records(records)
        print(f"{run} -> {dest / run.name}: {len(records)} examples")


def summary(examples: list[dict]) -> dict:
    """A row's totals over its timed examples: tokens per second measured, modeled under each
    profile, and recorded on the machine that made the run."""
    toks = sum(e["tokens"] for e in examples)
    rate = lambda secs: toks / sum(secs)  # noqa: E731
    return {
        "n": len(examples),
        "tokens": toks,
        "large_token_share": sum(e["large_tokens"] for e in examples) / toks,
        "measured_tok_per_s": rate(e["measured_s"] for e in examples),
        **{f"modeled_tok_per_s_{k}": rate(e["modeled_s"][k] for e in examples)
           for k in examples[0]["modeled_s"]},
        "recorded_tok_per_s_cpu_machine": rate(e["recorded_s_cpu_machine"] for e in examples),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("transformers", "llama.cpp"), default="transformers")
    ap.add_argument("--configs", type=Path, help="--engine transformers: the models' configs")
    ap.add_argument("--skeletons", type=Path, help="--engine llama.cpp: the GGUF skeletons")
    ap.add_argument("--save-skeletons", type=Path,
                    help="write the default pair's GGUF skeletons and exit")  # fmt: skip
    ap.add_argument("--probe", type=int, nargs="*",
                    help="--engine llama.cpp: time one-token passes of each model at these CPU "
                         "thread counts first (no rows needed; without --runs, only that)")  # fmt: skip
    ap.add_argument("--gguf-dir", type=Path, default=Path("/tmp"),
                    help="where the random-weights GGUF files are written")  # fmt: skip
    ap.add_argument("--save-configs", type=Path, help="write the default pair's configs and exit")
    ap.add_argument("--report", type=Path, nargs="+",
                    help="print outputs as the leaderboard's tables and exit (a results folder's "
                         "device/*.json appear in its leaderboard)")  # fmt: skip
    ap.add_argument("--runs", type=Path, nargs="+", default=[])
    ap.add_argument(
        "--pack-rows",
        type=Path,
        metavar="DEST",
        help="copy --runs' first --limit replayable examples into DEST and exit",
    )
    ap.add_argument("--limit", type=int, default=8, help="examples per row (see load_rows)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no example after this")
    ap.add_argument("--small-device", default="cpu")
    ap.add_argument("--large-device", default="cuda")
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads (0: torch's default; llama.cpp: all cores)")  # fmt: skip
    ap.add_argument("--eos-id", type=int, default=EOS_PLACEHOLDER, help="end token id to replay")
    ap.add_argument("--warmup-examples", type=int, default=0,
                    help="replay this many first examples of every row untimed (in --limit)")  # fmt: skip
    ap.add_argument("--generate-check", type=int, default=0,
                    help="also time large alone in transformers' generate for this many tokens, "
                         "eager and compiled (static cache), after the rows")  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("device-latency.json"))
    args = ap.parse_args()
    if args.save_configs:
        save_configs(args.save_configs)
        return
    if args.save_skeletons:
        save_skeletons(args.save_skeletons)
        return
    if args.pack_rows:
        pack_rows(args.runs, args.limit, args.pack_rows)
        return
    if args.report:
        from reports.leaderboard import _md_table, device_tables

        for t in device_tables(args.report):
            print(f"{t.title}\n\n{_md_table(t)}\n")
        return
    if args.generate_check and args.engine != "transformers":
        raise SystemExit("--generate-check times transformers' generate: --engine transformers")
    if args.probe and args.engine != "llama.cpp":
        raise SystemExit("--probe times the llama.cpp workers: --engine llama.cpp")
    if args.threads and args.engine == "transformers":
        torch.set_num_threads(args.threads)
    threads = args.threads or os.cpu_count() or 1
    t_start = time.perf_counter()
    from harness.evaluation.replay import replay_timed
    from harness.metrics.costmodel import GB, HardwareProfile, measure_bandwidth, modeled_seconds
    from harness.metrics.quality import example_bytes, n_large_forwards

    devices = {"small": args.small_device, "large": args.large_device}
    if args.engine == "llama.cpp":
        shadows = {r: shadow_llamacpp(args.skeletons, r, d, threads, args.gguf_dir)
                   for r, d in devices.items()}  # fmt: skip
    else:
        shadows = {r: shadow(args.configs, r, d) for r, d in devices.items()}
    infos = {role: s.info.__dict__ for role, s in shadows.items()}
    probes = {}
    if args.probe:
        probes = {role: probe(s, args.probe) for role, s in shadows.items()}
        if not args.runs:
            args.out.write_text(
                json.dumps(
                    {
                        "machine": machine(args.engine, threads, shadows),
                        "models": infos,
                        "probe_ms": probes,
                    },
                    indent=1,
                )
            )
            return
    cpu_bw = measure_bandwidth()
    gpu_bw = gpu_copy_bandwidth() if args.large_device.startswith("cuda") else cpu_bw
    profiles = {
        "measured": HardwareProfile("measured", cpu_bw, gpu_bw, False, 0.0, "copy probes"),
        "datasheet": HardwareProfile("datasheet", cpu_bw, 3350 * GB, False, 0.0,
                                     "CPU probe; H100 SXM5 3,350 GB/s"),
    }  # fmt: skip
    out = {
        "machine": machine(args.engine, threads, shadows),
        "bandwidth_gbs": {"cpu_probe": cpu_bw / GB, "gpu_copy": gpu_bw / GB},
        "models": infos,
        "probe_ms": probes,
        "pipe_round_trip_ms": {r: getattr(s, "ping_ms", 0.0) for r, s in shadows.items()},
        "rows": {},
        "setup_s": None,
    }
    rows = load_rows(args.runs, args.limit)
    # warm-up: one short replay per model (CUDA context, kernels), not counted
    first = rows[0][2][0]["generation"]
    warm = {**first, "token_ids": first["token_ids"][:8], "provenance": first["provenance"][:8]}
    for gen_large in (False, True):
        steps = {"drafted": [0 if gen_large else 1] * 8, "kept": [0 if gen_large else 1] * 8,
                 "large_tokens": [1 if gen_large else 0] * 8}  # fmt: skip
        w = {**warm, "stop_reason": "max_tokens", "steps": steps,
             "provenance": [int(gen_large)] * len(warm["token_ids"])}  # fmt: skip
        replay_timed(shadows, w, None, len(w["token_ids"]), False, time.perf_counter)

    def replay(manifest: dict, gen: dict):
        """The recorded generation of that run decoded again over the shadows, timed."""
        verify = manifest["router"] == "speculative"  # large reads each draft first
        budget = manifest["decode"]["max_new_tokens"]
        return replay_timed(shadows, gen, args.eos_id, budget, verify, time.perf_counter)

    # and whole examples of every row, untimed: the first example's large passes were ~2.5x the
    # rest's on the GPU (first use of each cache length, most likely; docs/gpu.md)
    for i in range(args.warmup_examples):
        for _, manifest, records in rows:
            replay(manifest, records[i]["generation"])
    out["warmup_examples"] = [r["example_id"] for r in rows[0][2][: args.warmup_examples]]
    out["setup_s"] = time.perf_counter() - t_start
    for run, manifest, _ in rows:
        out["rows"][run.name] = {
            "run": str(run),
            "router": manifest["router"],
            "router_args": manifest.get("router_args", {}),
            "task": manifest.get("task"),
            "examples": [],
        }
    # example by example across the rows, so a cut by --budget-s leaves every row the same n
    for i in range(args.warmup_examples, len(rows[0][2])):
        if time.perf_counter() - t_start > args.budget_s:
            out["cut_by_budget_at_example"] = i
            break
        for run, manifest, records in rows:
            rec, gen = records[i], records[i]["generation"]
            again = replay(manifest, gen)
            r = {"generation": again.to_json()}
            by_pass: dict[str, list[float]] = {}
            for f in again.forwards:
                if f.phase != "prefill":
                    by_pass.setdefault(f"{f.model}/{f.phase}/{f.tokens_in}", []).append(f.seconds)
            out["rows"][run.name]["examples"].append({
                "example_id": rec["example_id"],
                "tokens": len(again.token_ids),
                "large_tokens": sum(again.provenance),
                "measured_s": again.seconds,
                "recorded_s_cpu_machine": gen["seconds"],
                "modeled_s": {
                    k: modeled_seconds(example_bytes(r, infos), n_large_forwards(r), p)
                    for k, p in profiles.items()
                },
                "median_pass_s": {k: statistics.median(v) for k, v in by_pass.items()},
                "passes": {k: len(v) for k, v in by_pass.items()},
            })  # fmt: skip
            out["rows"][run.name]["summary"] = summary(out["rows"][run.name]["examples"])
            args.out.write_text(json.dumps(out, indent=1))  # a run cut short keeps its rows
            print(f"{run.name} {rec['example_id']}: {len(again.token_ids)} tokens "
                  f"{again.seconds:.2f} s", flush=True)  # fmt: skip
    for name, row in out["rows"].items():
        print(name, json.dumps(row.get("summary")), flush=True)
    if args.generate_check:
        out["generate_check"] = {"tokens": args.generate_check}
        args.out.write_text(json.dumps(out, indent=1))
        out["generate_check"].update(generate_check(shadows["large"], args.generate_check))
    out["wall_s"] = time.perf_counter() - t_start
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
