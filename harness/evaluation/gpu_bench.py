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
                 the one-token step a CUDA graph) and llama.cpp with every layer on the GPU
                 (random weights written as a GGUF, needs a CUDA build of llama-cpp-python)
  seeds'         small on the CPU (llama.cpp where installed, else transformers), large on the
  setting        GPU: the same routers per stream (B = 1) and batched (B = 16)

Beside each core row: the time inside model passes (`passes_s`, every batched pass timed with
the device synchronized), so `measured / passes` is the share of wall time the passes explain,
and for the hybrid rows the cost model `B / (t_small + share * t_large)`, with t_small and
t_large the median one-token batched pass of the small-only and large-only rows at the same B.
Entropy's threshold is the 80th percentile of small's entropies on a short small-only decode
(random weights give nearly uniform, nearly equal entropies, so a threshold in nats from real
models would defer everything or nothing); it is fixed for the whole run and written in the JSON.
Memory: peak GPU memory allocated during the B = 64 rows, and the bytes of each model's KV cache.
Sections stop being started once --budget-s seconds have passed (the JSON says which were
skipped), so a run ends near its budget on any machine; --sections runs only some of them
(generate, core, llama.cpp, seeds).
"""

from __future__ import annotations

import contextlib
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
from harness.core.loop import DecodeConfig
from harness.core.scheduler import Job, generate_many
from harness.core.stats import summarize
from harness.evaluation.random_pair import (
    gguf_of,
    hf_backend,
    llamacpp_backends,
    llamacpp_status,
    random_model,
)
from routers import get_router

# config.json fields of Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct (the default pair)
ROUTERS = (  # (row, router, arguments); entropy's threshold is set per run
    ("small-only", "small", {}),
    ("large-only", "large", {}),
    ("random p=0.2", "random", {"p": 0.2}),
    ("entropy", "entropy", {}),
    ("speculative k=4", "speculative", {"k": 4}),
)
HYBRID = ("random p=0.2", "entropy")  # rows the cost model predicts
SECTIONS = ("generate", "core", "llama.cpp", "seeds")  # what one run can measure, in order
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

    passes: list = field(default_factory=list)  # (role, calls, longest feed, seconds)

    def wrap(self, role: str, owner) -> None:
        inner = owner.forward_batch

        def timed(calls, inner=inner):
            owner.sync()
            t0 = time.perf_counter()
            out = inner(calls)
            owner.sync()
            self.passes.append((role, len(calls), max(len(c[1]) for c in calls),
                                time.perf_counter() - t0))  # fmt: skip
            return out

        owner.forward_batch = timed  # the instance's: scheduler and sequences call this one

    def seconds(self) -> float:
        return sum(p[3] for p in self.passes)

    def one_token(self, role: str) -> float:
        """Median seconds of `role`'s passes in which every call fed one token."""
        times = [p[3] for p in self.passes if p[0] == role and p[2] == 1]
        return statistics.median(times) if times else math.nan


def prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, vocab, (n, length), generator=g).tolist()


# --- the core's rows --------------------------------------------------------------------------


def core_run(backends: dict, router, b: int, s: Settings, tokens: int, seed: int) -> dict:
    """b generations of `tokens` tokens at once through `generate_many`: throughput, share,
    and the passes' times."""
    timer = PassTimer()
    owners = {}
    for role, backend in backends.items():
        owner = getattr(backend, "owner", backend)
        owners[role] = (owner, owner.__dict__.get("forward_batch"))
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
            owner.__dict__.pop("forward_batch", None)
            if own is not None:
                owner.forward_batch = own
    bad = [g for g in gens if isinstance(g, BaseException)]
    if bad:
        raise bad[0]
    n = sum(len(g.token_ids) for g in gens)
    return {
        "tokens": n,
        "wall_s": wall,
        "tok_s": n / wall,
        "large_token_share": sum(sum(g.provenance) for g in gens) / n,
        "passes_s": timer.seconds(),
        "passes": {r: sum(p[0] == r for p in timer.passes) for r in backends},
        "t_small": timer.one_token("small"),
        "t_large": timer.one_token("large"),
    }


def _slots(backends: dict, b: int) -> list[dict]:
    from harness.backends import sequences

    per_role = {role: sequences(bk, b) for role, bk in backends.items()}
    return [{role: seqs[i] for role, seqs in per_role.items()} for i in range(b)]


def warm(backends: dict, b: int, s: Settings, tokens: int) -> None:
    """An untimed run at this batch size, and every decode-step graph its lengths will need."""
    for bk in backends.values():
        if isinstance(bk, HFBackend) and bk.step == "graph":
            bk.sequences(b)
            bk.capture_steps(s.prompt_tokens + tokens + 8)
    core_run(backends, get_router("large"), b, s, 2, s.seed + 99)
    if "small" in backends:
        core_run(backends, get_router("small"), b, s, 2, s.seed + 99)


def entropy_threshold(backends: dict, s: Settings) -> float:
    """The ENTROPY_QUANTILE of small's entropies over a short greedy decode of a few prompts."""
    small = backends["small"]
    values = []
    for p in prompts(4, s.prompt_tokens, small.n_vocab, s.seed + 7):
        small.reset()
        out, _ = small.forward(p, 1)
        for _ in range(16):
            st = summarize(out) if isinstance(out, torch.Tensor) else out
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


def core_rows(backends: dict, s: Settings, tokens: int, threshold: float, label: str, budget):
    """Every router at every batch size on `backends`, with the cost model beside the hybrids."""
    rows = []
    batches = s.seeds_batches if label.startswith("seeds") else s.batches
    for b in batches:
        if not budget.allows(f"{label} B={b}"):
            continue
        warm(backends, b, s, tokens)
        by_name = {}
        for name, router, args in ROUTERS:
            args = {"threshold": threshold} if router == "entropy" else args
            r = core_run(backends, get_router(router, args), b, s, tokens, s.seed)
            by_name[name] = r
            row = {"setting": label, "B": b, "config": name, **_rounded(r)}
            row["measured_over_passes"] = round(r["tok_s"] * r["passes_s"] / r["tokens"], 3)
            rows.append(row)
        t_s, t_l = by_name["small-only"]["t_small"], by_name["large-only"]["t_large"]
        for row in rows[-len(ROUTERS) :]:
            if row["config"] in HYBRID:
                model = b / (t_s + row["large_token_share"] * t_l)
                row["cost_model_tok_s"] = round(model, 1)
                row["measured_over_cost_model"] = round(row["tok_s"] / model, 3)
        print(_progress(rows[-len(ROUTERS) :]), flush=True)
    return rows


def _rounded(r: dict) -> dict:
    out = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
    out["tok_s"] = round(r["tok_s"], 1)
    return out


def _progress(rows) -> str:
    return "\n".join(
        f"  {r['setting']} B={r['B']} {r['config']}: {r['tok_s']} tok/s"
        + (f" (cost model {r['cost_model_tok_s']})" if "cost_model_tok_s" in r else "")
        for r in rows
    )


def batch_numerics(backend: HFBackend, n: int = 8, seed: int = 0) -> dict:
    """How far a batched call's logits move from the same call made alone: n ragged calls
    (cache lengths and new tokens differ by row) batched in one pass against each alone, on
    `backend`'s model and dtype. Returns the largest |difference| over the vocabulary, and how
    many of the n * rows greedy tokens differ (a flip needs a top-2 margin below the move)."""
    g = torch.Generator().manual_seed(seed)
    vocab = backend.n_vocab
    group = [
        (torch.randint(10, vocab, (int(torch.randint(1, 40, (1,), generator=g)),), generator=g),
         torch.randint(10, vocab, (1 + i % 5,), generator=g).tolist())
        for i in range(n)
    ]  # fmt: skip
    seqs = backend.sequences(n)
    for s, (prefix, _) in zip(seqs, group, strict=True):
        s.reset()
        s.forward(prefix.tolist(), 1)
    calls = [(s, new, len(new), False) for s, (_, new) in zip(seqs, group, strict=True)]
    batched = backend.forward_batch(calls)
    worst, flips, rows = 0.0, 0, 0
    for (prefix, new), (got, _) in zip(group, batched, strict=True):
        backend.reset()
        backend.forward(prefix.tolist(), 1)
        alone, _ = backend.forward(new, len(new))
        worst = max(worst, float((got - alone).abs().max()))
        flips += int((got.argmax(-1) != alone.argmax(-1)).sum())
        rows += len(new)
    for s in seqs:
        s.reset()
    return {"dtype": str(backend.model.dtype).replace("torch.", ""), "calls": n, "rows": rows,
            "max_abs_logit_diff": worst, "argmax_flips": flips}  # fmt: skip


# --- transformers' own generate ---------------------------------------------------------------


def hf_generate_rows(model, s: Settings, budget: Budget) -> list[dict]:
    """Large's own `generate`: eager and static-cache (compiled by transformers on CUDA)."""
    rows = []
    for b in s.hf_batches:
        if not budget.allows(f"transformers generate B={b}"):
            continue
        ids = torch.tensor(prompts(b, s.prompt_tokens, model.config.vocab_size, s.seed))
        ids = ids.to(model.device)
        for mode in ("eager", "static"):
            kw = {"cache_implementation": "static"} if mode == "static" else {}
            runs = 2 if mode == "static" else 1  # the first static run compiles: untimed
            for _ in range(runs):
                t = _timed_generate(model, ids, s.new_tokens, kw)
            label = "static, compiled" if s.device.startswith("cuda") else "static (CPU: eager)"
            rows.append({"setting": "transformers generate (large)", "B": b,
                         "config": "eager" if mode == "eager" else label,
                         "tok_s": round(b * s.new_tokens / t, 1), "wall_s": round(t, 3)})  # fmt: skip
            print(_progress(rows[-1:]), flush=True)
    return rows


def _timed_generate(model, ids, n: int, kw: dict) -> float:
    _sync(model.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
            do_sample=False, eos_token_id=None, pad_token_id=0, **kw,
        )  # fmt: skip
    _sync(model.device)
    assert out.shape[1] == ids.shape[1] + n
    return time.perf_counter() - t0


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# --- the run ------------------------------------------------------------------------------------


def bench(s: Settings, configs: dict, out: Path | None) -> dict:
    """Every section of the module docstring, in order, within the time budget."""
    start, budget = time.perf_counter(), Budget(s.budget_s)
    result = {"settings": _describe(s), "versions": _versions(), "rows": [],
              "skipped": budget.skipped}  # fmt: skip

    def save() -> None:  # after every section: a run cut short keeps what it measured
        result["seconds"] = round(time.perf_counter() - start, 1)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=1) + "\n")

    gpu = s.device.startswith("cuda")
    n_ctx = s.prompt_tokens + max(s.new_tokens, s.seeds_tokens) + 16
    models = {role: random_model(configs[role], s.device, s.dtype, s.seed + i)
              for i, role in enumerate(("small", "large"))}  # fmt: skip
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
        with _peak_memory(result, s, hf):
            result["rows"] += core_rows(hf, s, s.new_tokens, threshold, "core hf", budget)
    result["graphs"] = {  # decode steps captured as CUDA graphs, and any that fell back
        role: {"step": b.step, "captured": sum(g is not None for g in b.graphs.values()),
               "failures": b.graph_failures}
        for role, b in hf.items()
    }  # fmt: skip
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
        result["rows"] += seeds_rows(configs, models["large"], s, folder, threshold, n_ctx, budget)
    save()
    return result


def _quant(path: Path) -> str:
    """The weight type a GGUF written by `gguf_of` holds, from its name (q8_0 or f32)."""
    return path.stem.rsplit("-", 1)[-1]


def seeds_rows(configs, large, s: Settings, folder: Path, threshold: float, n_ctx: int, budget):
    """Small on the CPU (llama.cpp, Q8_0, where installed; else transformers), large on the
    pair's device (transformers), per stream and batched."""
    small = random_model(configs["small"], "cpu", torch.float32, s.seed)
    torch.set_num_threads(s.threads)
    large_b = hf_backend(large, "large", n_ctx)
    if not llamacpp_status(gpu=False):
        path = gguf_of(small, folder, "small", s.threads, quantize=True)
        small_b = llamacpp_backends({"small": path}, {"small": "cpu"}, max(s.seeds_batches),
                                    n_ctx, s.threads)["small"]  # fmt: skip
        label = f"seeds: small llama.cpp CPU ({_quant(path)}), large hf {s.device}"
    else:
        small_b = hf_backend(small.to(torch.bfloat16), "small", n_ctx)
        label = f"seeds: small hf CPU bf16, large hf {s.device}"
    backends = {"small": small_b, "large": large_b}
    return core_rows(backends, s, s.seeds_tokens, threshold, label, budget)


@contextlib.contextmanager
def _peak_memory(result: dict, s: Settings, backends: dict):
    """Peak GPU memory allocated during the largest batch, and each model's KV bytes."""
    if s.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    yield
    b = max(s.batches)
    mem = {f"kv_bytes_{role}": bk.kv_nbytes() for role, bk in backends.items()}
    mem["weights_bytes"] = sum(bk.info.weight_bytes for bk in backends.values())
    if s.device.startswith("cuda"):
        mem["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    result[f"memory_B{b}"] = mem


def _describe(s: Settings) -> dict:
    d = {k: getattr(s, k) for k in s.__dataclass_fields__}
    d["dtype"] = str(s.dtype).replace("torch.", "")
    if s.device.startswith("cuda"):
        d["gpu"] = torch.cuda.get_device_name()
    return d


def _versions() -> dict:
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0]}  # fmt: skip


COLUMNS = ("setting", "B", "config", "tok_s", "large_token_share", "cost_model_tok_s",
           "measured_over_cost_model", "measured_over_passes")  # fmt: skip


def table(result: dict) -> str:
    """The rows as one markdown table (what docs/speed.md's GPU table is made from)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in result["rows"]:
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |")
    for k, v in result.items():
        if k.startswith("memory_"):
            lines.append(f"\n{k}: " + ", ".join(f"{a} {b / 2**30:.2f} GiB" for a, b in v.items()))
    return "\n".join(lines)
