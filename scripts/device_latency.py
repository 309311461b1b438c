"""Measured latency of recorded rows with small on a CPU and large on a GPU (issue 14 step 5).

The rows are runs made on this project's CPU machine (`runs/.../records.jsonl`); the GPU machine
that `device` lends has no model weights and cannot fetch any, so each model is rebuilt there
from its config with random weights (a dense pass costs the same whatever its weights) and every
recorded generation is decoded again through the core's own loop with the recorded steps
(`harness.replay.replay_timed`): the same passes of the same sizes, small on the CPU, large on
the GPU, on the transformers backend, timed by the wall clock. Beside each row: its modeled
latency under the cost model (`harness.costmodel`) for this machine (the CPU's bandwidth measured
by the copy probe, the GPU's by a device copy; no network) and for the H100 datasheet.

    python scripts/device_latency.py --configs CARRY/configs --runs CARRY/small CARRY/large \
        CARRY/random --limit 8 --budget-s 420 --out $OUT/device-latency.json

`--configs` holds small/config.json and large/config.json (`--save-configs DIR` writes them here
from the packaged models). The output (rows and their summaries) is rewritten after every
example, so a run cut short by its time limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

ROWS_REPLAYED = {"small", "large", "random", "entropy", "confidence", "speculative"}
EOS_PLACEHOLDER = 151645  # Qwen2.5's <|im_end|>; any id works: a pass's cost is the same


def save_configs(out: Path) -> None:
    """Write the default pair's configs (from the packaged models) into out/small, out/large."""
    from transformers import AutoConfig

    from harness import models

    for role, name in (("small", models.DEFAULT_SMALL), ("large", models.DEFAULT_LARGE)):
        where, _ = models.resolve_source(name, "bfloat16")
        AutoConfig.from_pretrained(where).save_pretrained(out / role)
        print(f"{role}: {name} -> {out / role}")


def shadow(config_dir: Path, role: str, device: str):
    """A random-weights model of the config's shape, as the project's HF backend on `device`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from harness.backends.hf import HFBackend
    from harness.models import kv_bytes_per_token, weight_bytes
    from harness.records import ModelInfo

    cfg = AutoConfig.from_pretrained(config_dir / role)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    info = ModelInfo(
        name=role,
        source=f"{config_dir / role} (random weights)",
        device=str(device),
        dtype="bfloat16",
        n_params=sum(p.numel() for p in model.parameters()),
        weight_bytes=weight_bytes(model),
        kv_bytes_per_token=kv_bytes_per_token(model.config, 2),
    )
    return HFBackend(model, info)


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


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers

    return {
        "cpu": cpu,
        "cpu_threads": torch.get_num_threads(),
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
        manifest = json.loads((run / "manifest.json").read_text())
        if manifest["router"] not in ROWS_REPLAYED:
            raise SystemExit(f"{run}: router {manifest['router']!r} is not replayed here "
                             f"(one of {sorted(ROWS_REPLAYED)})")  # fmt: skip
        records = {}
        for line in (run / "records.jsonl").open():
            r = json.loads(line)
            ok = not r.get("error") and r["generation"]["stop_reason"] != "max_tokens"
            records[r["example_id"]] = r if ok else None
        rows.append((run, manifest, records))
    first = rows[0][2]
    keep = [i for i in first if all(rec.get(i) for _, _, rec in rows)][:limit]
    return [(run, m, [rec[i] for i in keep]) for run, m, rec in rows]


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
    ap.add_argument("--configs", type=Path)
    ap.add_argument("--save-configs", type=Path, help="write the default pair's configs and exit")
    ap.add_argument("--report", type=Path, nargs="+",
                    help="print outputs as the leaderboard's tables and exit (a results folder's "
                         "device/*.json appear in its leaderboard)")  # fmt: skip
    ap.add_argument("--runs", type=Path, nargs="+", default=[])
    ap.add_argument("--limit", type=int, default=8, help="examples per row (see load_rows)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no example after this")
    ap.add_argument("--small-device", default="cpu")
    ap.add_argument("--large-device", default="cuda")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
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
    if args.report:
        from reports.leaderboard import _md_table, device_tables

        for t in device_tables(args.report):
            print(f"{t.title}\n\n{_md_table(t)}\n")
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    from harness.costmodel import GB, HardwareProfile, measure_bandwidth, modeled_seconds
    from harness.metrics import example_bytes, n_large_forwards
    from harness.replay import replay_timed

    shadows = {
        "small": shadow(args.configs, "small", args.small_device),
        "large": shadow(args.configs, "large", args.large_device),
    }
    infos = {role: s.info.__dict__ for role, s in shadows.items()}
    cpu_bw = measure_bandwidth()
    gpu_bw = gpu_copy_bandwidth() if args.large_device.startswith("cuda") else cpu_bw
    profiles = {
        "measured": HardwareProfile("measured", cpu_bw, gpu_bw, False, 0.0, "copy probes"),
        "datasheet": HardwareProfile("datasheet", cpu_bw, 3350 * GB, False, 0.0,
                                     "CPU probe; H100 SXM5 3,350 GB/s"),
    }  # fmt: skip
    out = {
        "machine": machine(),
        "bandwidth_gbs": {"cpu_probe": cpu_bw / GB, "gpu_copy": gpu_bw / GB},
        "models": infos,
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
    # rest's on the GPU (first use of each cache length, most likely; docs/issue14-device.md)
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
