"""`hybridbench bench-gpu`: the decoding core against transformers' own `generate`, on a GPU.

    hybridbench bench-gpu --out runs/bench-gpu.json             # the default pair's shapes, CUDA
    hybridbench bench-gpu --small-config DIR --large-config DIR  # any pair's shapes (config.json)
    hybridbench bench-gpu --tiny --out /tmp/b.json               # tiny shapes, a few tokens: CPU

Models are random weights of the pair's shapes, built from their configs (by default the
Qwen2.5-Coder 0.5B / 1.5B shapes written below; no hub, no weight files), in bf16 on the GPU.
Every generation is greedy with EOS off, so each emits exactly --new-tokens tokens after a
--prompt-tokens prompt of random ids. In one run, side by side (tok/s counts every stream):

  transformers   large's own `generate` at B = 1 and 64: eager (DynamicCache) and with a static
                 cache, which transformers compiles on CUDA (`torch.compile`, reduce-overhead);
                 each compiled run follows an untimed one of the same shape
  core           `generate_many` with B slots and B prompts at B = 1, 16, 64 for small-only,
                 large-only, random p = 0.2, entropy at a fixed threshold and speculative k = 4,
                 on each backend available: transformers (`HFBackend`: one cache for all slots,
                 every pass of feeds up to 32 tokens a CUDA graph per bucketed shape, all
                 captured before each batch size's rows) and llama.cpp with every layer on the GPU
                 (random weights written as a GGUF, needs a CUDA build of llama-cpp-python)
  seeds'         small on the CPU (llama.cpp where installed, else transformers), large on the
  setting        GPU: the same routers per stream (B = 1) and batched (B = 16)

Beside each core row: the time inside model passes (`passes_s`, every batched pass timed with
the device synchronized), so `measured / passes` is the share of wall time the passes explain;
the cost model, one for every router (`harness.metrics.costmodel.step_priced_seconds`): the
row's own decode passes, each priced at its model's one-token step time at that B (t_small and
t_large: the median one-token batched pass of the small-only and large-only rows), prefills at
their measured time; and, in the JSON, the passes counted per model per batch size
(`passes_by_size`) and measured per feed bucket (`feed_buckets`, printed by `details`).
Entropy's threshold is the 80th percentile of small's entropies on a short small-only decode
(random weights give nearly uniform, nearly equal entropies, so a threshold in nats from real
models would defer everything or nothing); it is fixed for the whole run and written in the JSON.
Graphs: per batch size and model, the graphs captured by feed bucket, the seconds capturing took
and every capture that failed with its reason (`captures`). Memory: the peak GPU memory
allocated in each row (`peak_allocated_bytes`) and its largest at B = 64, and the bytes of each
model's KV cache and weights.
Sections stop being started once --budget-s seconds have passed (the JSON says which were
skipped), so a run ends near its budget on any machine; --sections runs only some of them
(generate, core, llama.cpp, seeds).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.backends.hf import HFBackend
from harness.backends.hf_static import FEED_BUCKETS, feed_bucket
from harness.core.loop import DecodeConfig
from harness.core.scheduler import Job, generate_many
from harness.core.stats import token_stats
from harness.evaluation.gpu_reference import batch_numerics, hf_generate_rows, prompts
from harness.evaluation.gpu_tables import details, progress, table  # noqa: F401 (the CLI's)
from harness.evaluation.random_pair import (
    gguf_of,
    hf_backend,
    llamacpp_backends,
    llamacpp_status,
    random_model,
)
from harness.metrics import costmodel
from harness.metrics.costmodel import PassRecord
from routers import get_router

# config.json fields of Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct (the default pair)
ROUTERS = (  # (row, router, arguments); entropy's threshold is set per run
    ("small-only", "small", {}),
    ("large-only", "large", {}),
    ("random p=0.2", "random", {"p": 0.2}),
    ("entropy", "entropy", {}),
    ("speculative k=4", "speculative", {"k": 4}),
)
SECTIONS = ("generate", "core", "llama.cpp", "seeds")  # what one run can measure, in order
WRAPPED = ("forward_batch", "launch_batch")  # the passes a `PassTimer` times
ENTROPY_QUANTILE = 0.8  # entropy defers the top 20% of small's entropies


@dataclass(frozen=True)
class Settings:
    """One bench-gpu run's shape and sizes."""

    device: str  # where the pair runs ("cuda", or "cpu" for --tiny)
    dtype: torch.dtype  # the models' dtype
    prompt_tokens: int  # random prompt ids per generation
    new_tokens: int  # tokens each generation emits (EOS off)
    batches: tuple[int, ...]  # core batch sizes
    hf_batches: tuple[int, ...]  # transformers' generate batch sizes
    seeds_batches: tuple[int, ...]  # batch sizes of the seeds' setting
    seeds_tokens: int  # new tokens in the seeds' setting (its small runs on the CPU)
    threads: int  # CPU threads for the seeds' setting's small model
    budget_s: float  # no section starts after this many seconds
    seed: int = 0
    sections: tuple[str, ...] = SECTIONS  # the sections run (SECTIONS' order)


@dataclass
class PassTimer:
    """Times every batched model pass of the owners it wraps (device synchronized), by role."""

    passes: list[PassRecord] = field(default_factory=list)

    def wrap(self, role: str, owner) -> None:
        """Time `owner`'s passes: `forward_batch`, and `launch_batch` (a pass issued now and
        read later: timed from issue to outputs, so a device pass that ran beside a CPU pass
        counts the time they overlapped)."""
        inner = owner.forward_batch

        def timed(calls, inner=inner):
            owner.sync()
            t0 = time.perf_counter()
            out = inner(calls)
            owner.sync()
            self._record(role, calls, t0)
            return out

        owner.forward_batch = timed  # the instance's: scheduler and sequences call this one
        if hasattr(owner, "launch_batch"):
            launch = owner.launch_batch

            def launched(calls, launch=launch):
                t0 = time.perf_counter()
                read = launch(calls)

                def timed_read():
                    out = read()
                    owner.sync()
                    self._record(role, calls, t0)
                    return out

                return timed_read

            owner.launch_batch = launched

    def _record(self, role: str, calls, t0: float) -> None:
        # lengths have advanced by the pass's feeds: a prompt's call now holds exactly its ids
        prefill = any(getattr(c[0], "length", -1) == len(c[1]) for c in calls)
        feed = max(len(c[1]) for c in calls)
        self.passes.append(PassRecord(role, len(calls), feed, prefill, time.perf_counter() - t0))

    def seconds(self) -> float:
        return sum(p.seconds for p in self.passes)

    def one_token(self, role: str) -> float:
        """Median seconds of `role`'s decode passes in which every call fed one token."""
        times = [p.seconds for p in self.passes if p.model == role and p.feed == 1]
        return statistics.median(times) if times else math.nan


# --- the core's rows --------------------------------------------------------------------------


def core_run(backends: dict, router, b: int, s: Settings, tokens: int, seed: int) -> dict:
    """b generations of `tokens` tokens at once through `generate_many`: throughput, share,
    and the passes' times."""
    timer = PassTimer()
    gpu = s.device.startswith("cuda")
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    owners = {}
    for role, backend in backends.items():
        owner = getattr(backend, "owner", backend)
        owners[role] = (owner, {k: owner.__dict__.get(k) for k in WRAPPED})
        timer.wrap(role, owner)
    slots = _slots(backends, b)
    cfg = DecodeConfig(max_new_tokens=tokens, seed=seed)
    vocab = min(getattr(bk, "n_vocab", 0) or 0 for bk in backends.values()) or 100
    jobs = [Job(i, p, cfg) for i, p in enumerate(prompts(b, s.prompt_tokens, vocab, seed))]
    try:
        for bk in backends.values():
            bk.sync()
        t0 = time.perf_counter()
        gens = [g for _, g in generate_many(slots, router, jobs)]
        for bk in backends.values():
            bk.sync()
        wall = time.perf_counter() - t0
    finally:
        for owner, own in owners.values():  # unwrap
            for k, method in own.items():
                owner.__dict__.pop(k, None)
                if method is not None:
                    setattr(owner, k, method)
    bad = [g for g in gens if isinstance(g, BaseException)]
    if bad:
        raise bad[0]
    n = sum(len(g.token_ids) for g in gens)
    peak = {"peak_allocated_bytes": torch.cuda.max_memory_allocated()} if gpu else {}
    return {
        "tokens": n,
        "wall_s": wall,
        "tok_s": n / wall,
        "large_token_share": sum(sum(g.provenance) for g in gens) / n,
        "passes_s": timer.seconds(),
        "passes": {r: sum(p.model == r for p in timer.passes) for r in backends},
        "t_small": timer.one_token("small"),
        "t_large": timer.one_token("large"),
        **peak,
        "pass_records": timer.passes,  # the cost model's input (not written to the JSON)
    }


def _slots(backends: dict, b: int) -> list[dict]:
    from harness.backends import sequences

    per_role = {role: sequences(bk, b) for role, bk in backends.items()}
    return [{role: seqs[i] for role, seqs in per_role.items()} for i in range(b)]


def warm(backends: dict, b: int, s: Settings, tokens: int) -> dict:
    """Every static pass's graph the run's lengths will need at this batch size, captured, and
    an untimed run; returns what was captured, how long it took and what failed, by role."""
    captures = {}
    for role, bk in backends.items():
        if isinstance(bk, HFBackend) and bk.step == "graph":
            bk.sequences(b)
            before, t0 = len(bk.graph_failures), time.perf_counter()
            bk.capture_steps(s.prompt_tokens + tokens)
            bk.sync()
            captures[role] = {
                "capture_s": round(time.perf_counter() - t0, 2),
                "graphs_by_feed": bk.static.captured(),
                "failures": bk.graph_failures[before:],
            }
    core_run(backends, get_router("large"), b, s, 2, s.seed + 99)
    if "small" in backends:
        core_run(backends, get_router("small"), b, s, 2, s.seed + 99)
    return captures


def entropy_threshold(backends: dict, s: Settings) -> float:
    """The ENTROPY_QUANTILE of small's entropies over a short greedy decode of a few prompts."""
    small = backends["small"]
    values = []
    for p in prompts(4, s.prompt_tokens, small.n_vocab, s.seed + 7):
        small.reset()
        out, _ = small.forward(p, 1)
        for _ in range(16):
            st = token_stats(out) if isinstance(out, torch.Tensor) else out
            values.append(float(st.entropy[-1]) if st.entropy is not None else math.nan)
            out, _ = small.forward([int(st.argmax[-1])], 1, level="stats")
    small.reset()
    values = [v for v in values if not math.isnan(v)]
    return float(torch.tensor(values).quantile(ENTROPY_QUANTILE))


class Budget:
    """Seconds left of a run: work not started once they are spent is listed in `skipped`."""

    def __init__(self, seconds: float):
        self.end, self.skipped = time.perf_counter() + seconds, []

    def allows(self, what: str) -> bool:
        if time.perf_counter() < self.end:
            return True
        self.skipped.append(what)
        print(f"(time budget spent: {what} skipped)", flush=True)
        return False


def core_rows(
    backends: dict,
    s: Settings,
    tokens: int,
    threshold: float,
    label: str,
    budget,
    captures: list | None = None,
):
    """Every router at every batch size on `backends`, each with the cost model beside it;
    the graphs captured before each batch size go to `captures`."""
    rows = []
    batches = s.seeds_batches if label.startswith("seeds") else s.batches
    for b in batches:
        if not budget.allows(f"{label} B={b}"):
            continue
        captured = warm(backends, b, s, tokens)
        if captures is not None and captured:
            captures.append({"setting": label, "B": b, **captured})
        runs = {}
        for name, router, args in ROUTERS:
            args = {"threshold": threshold} if router == "entropy" else args
            runs[name] = core_run(backends, get_router(router, args), b, s, tokens, s.seed)
        steps = {"small": runs["small-only"]["t_small"], "large": runs["large-only"]["t_large"]}
        for name, r in runs.items():
            rows.append(
                {"setting": label, "B": b, "config": name, **_rounded(r), **cost_model(r, steps)}
            )
        print(progress(rows[-len(ROUTERS) :]), flush=True)
    return rows


def cost_model(r: dict, steps: dict) -> dict:
    """A run's cost model (`costmodel.step_priced_seconds`: every decode pass at its model's
    one-token step time `steps` at this batch size), measured against it, and the passes it
    prices: counted per model per batch size, measured per feed bucket."""
    passes = r["pass_records"]
    model = r["tokens"] / costmodel.step_priced_seconds(passes, steps)
    out = {"measured_over_passes": round(r["tok_s"] * r["passes_s"] / r["tokens"], 3)}
    if math.isfinite(model):
        out["cost_model_tok_s"] = round(model, 1)
        out["measured_over_cost_model"] = round(r["tok_s"] / model, 3)
    out["passes_by_size"] = costmodel.passes_by_size(passes)
    out["feed_buckets"] = costmodel.feed_bucket_seconds(passes, feed_bucket)
    return out


def _rounded(r: dict) -> dict:
    out = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
    del out["pass_records"]
    out["tok_s"] = round(r["tok_s"], 1)
    return out


# --- the run ------------------------------------------------------------------------------------


def bench(s: Settings, configs: dict, out: Path | None) -> dict:
    """Every section of the module docstring, in order, within the time budget."""
    start, budget = time.perf_counter(), Budget(s.budget_s)
    result = {
        "settings": _describe(s),
        "versions": _versions(),
        "rows": [],
        "skipped": budget.skipped,
        "captures": [],
    }

    def save() -> None:  # after every section: a run cut short keeps what it measured
        result["seconds"] = round(time.perf_counter() - start, 1)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=1) + "\n")

    gpu = s.device.startswith("cuda")
    # room for the longest static pass's padding past a sequence's end: no cache regrowth (which
    # drops the graphs) in a timed run
    n_ctx = s.prompt_tokens + max(s.new_tokens, s.seeds_tokens) + 16 + FEED_BUCKETS[-1]
    models = {
        role: random_model(configs[role], s.device, s.dtype, s.seed + i)
        for i, role in enumerate(("small", "large"))
    }
    if "generate" in s.sections:
        print("transformers generate ...", flush=True)
        result["rows"] += hf_generate_rows(models["large"], s, budget)
        save()
    hf = {role: hf_backend(m, role, n_ctx) for role, m in models.items()}
    result["batch_numerics"] = {role: batch_numerics(b) for role, b in hf.items()}
    threshold = entropy_threshold(hf, s)
    result["entropy_threshold"] = threshold
    if "core" in s.sections:
        print("core, transformers backend ...", flush=True)
        rows = core_rows(hf, s, s.new_tokens, threshold, "core hf", budget, result["captures"])
        result["rows"] += rows
        result[f"memory_B{max(s.batches)}"] = _memory(rows, max(s.batches), hf)
    result["graphs"] = {  # static passes captured as CUDA graphs, and any that fell back
        role: {
            "step": b.step,
            "captured": sum(g is not None for g in b.graphs.values()),
            "failures": b.graph_failures,
        }
        for role, b in hf.items()
    }
    save()
    why = llamacpp_status(gpu)
    result["llama.cpp"] = why or "available"
    folder = Path(tempfile.mkdtemp(prefix="hybridbench-gpu-"))
    if not why and "llama.cpp" in s.sections and budget.allows("core llama.cpp"):
        print("core, llama.cpp backend ...", flush=True)
        files = {r: gguf_of(m, folder, r, s.threads, quantize=True) for r, m in models.items()}
        devices = {"small": s.device, "large": s.device}
        lc = llamacpp_backends(files, devices, max(s.batches), n_ctx, s.threads)
        label = f"core llama.cpp ({_quant(files['large'])})"
        result["rows"] += core_rows(lc, s, s.new_tokens, threshold, label, budget)
        save()
    if "seeds" in s.sections and budget.allows("seeds' setting"):
        print("seeds' setting: small on the CPU, large on the GPU ...", flush=True)
        result["rows"] += seeds_rows(
            configs, models["large"], s, folder, threshold, n_ctx, budget, result["captures"]
        )
    save()
    return result


def _quant(path: Path) -> str:
    """The weight type a GGUF written by `gguf_of` holds, from its name (q8_0 or f32)."""
    return path.stem.rsplit("-", 1)[-1]


def seeds_rows(
    configs, large, s: Settings, folder: Path, threshold: float, n_ctx: int, budget, captures: list
):
    """Small on the CPU (llama.cpp, Q8_0, where installed; else transformers), large on the
    pair's device (transformers), per stream and batched."""
    small = random_model(configs["small"], "cpu", torch.float32, s.seed)
    torch.set_num_threads(s.threads)
    large_b = hf_backend(large, "large", n_ctx)
    if not llamacpp_status(gpu=False):
        path = gguf_of(small, folder, "small", s.threads, quantize=True)
        small_b = llamacpp_backends(
            {"small": path}, {"small": "cpu"}, max(s.seeds_batches), n_ctx, s.threads
        )["small"]
        label = f"seeds: small llama.cpp CPU ({_quant(path)}), large hf {s.device}"
    else:
        small_b = hf_backend(small.to(torch.bfloat16), "small", n_ctx)
        label = f"seeds: small hf CPU bf16, large hf {s.device}"
    backends = {"small": small_b, "large": large_b}
    return core_rows(backends, s, s.seeds_tokens, threshold, label, budget, captures)


def _memory(rows: list[dict], b: int, backends: dict) -> dict:
    """Peak GPU memory allocated in the B = b rows (each row's own peak; graphs, caches and
    weights included), and each model's KV cache and weight bytes."""
    mem = {f"kv_bytes_{role}": bk.kv_nbytes() for role, bk in backends.items()}
    mem["weights_bytes"] = sum(bk.info.weight_bytes for bk in backends.values())
    peaks = [r["peak_allocated_bytes"] for r in rows if r["B"] == b and "peak_allocated_bytes" in r]
    if peaks:
        mem["peak_allocated_bytes"] = max(peaks)
    return mem


def _describe(s: Settings) -> dict:
    d = {k: getattr(s, k) for k in s.__dataclass_fields__}
    d["dtype"] = str(s.dtype).replace("torch.", "")
    if s.device.startswith("cuda"):
        d["gpu"] = torch.cuda.get_device_name()
    return d


def _versions() -> dict:
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
    }
