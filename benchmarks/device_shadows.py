"""The models `device_latency.py` replays rows on, rebuilt on a machine that has no weights: a
pass costs the same whatever the weights hold, so each model is its real shape with random
weights.

- transformers: `save_configs` writes the default pair's configs here; `shadow` builds a bf16
  model of a config's shape on the device, as the project's HF backend.
- llama.cpp: `save_skeletons` writes each GGUF file's header (metadata, tokenizer, tensor table:
  a few MB, where the 0.5 + 1.1 GB files cannot travel); `random_gguf` fills its tensors with
  random values in their own quantized types; `shadow_llamacpp` runs that file in a worker
  process of its own (`WorkerBackend`, `device_llamacpp_worker.py`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch


def save_configs(out: Path) -> None:
    """Write the default pair's configs (from the packaged models) into out/small, out/large."""
    from transformers import AutoConfig

    from harness.backends import models

    for role, name in (("small", models.DEFAULT_SMALL), ("large", models.DEFAULT_LARGE)):
        where, _ = models.resolve_source(name, "bfloat16")
        AutoConfig.from_pretrained(where).save_pretrained(out / role)
        print(f"{role}: {name} -> {out / role}")


def shadow(config_dir: Path, role: str, device: str):
    """A random-weights model of the config's shape, as the project's HF backend on `device`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from harness.backends.hf import HFBackend
    from harness.backends.models import kv_bytes_per_token, weight_bytes
    from harness.core.records import ModelInfo

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


# Quantized types of the default pair's GGUF files: the byte offsets of each block's f16 scales.
# Random bytes fill the rest of a block; scales this small keep every weight within ~0.1
# (random f16 scales could be inf or NaN). A file with another type is refused.
SCALES = {"Q4_K": (0, 2), "Q6_K": (208,), "Q5_0": (0,), "Q8_0": (0,)}
SCALE = {"Q4_K": 1e-4, "Q6_K": 1e-5, "Q5_0": 3e-3, "Q8_0": 2e-4}


def skeleton(path: Path, out: Path, role: str) -> None:
    """A GGUF file's header (everything before the first tensor's data: metadata, tokenizer,
    tensor table) into out/ROLE.head, its tensors (name, type, offset, bytes) into out/ROLE.json."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    out.mkdir(parents=True, exist_ok=True)
    with open(path, "rb") as f:
        (out / f"{role}.head").write_bytes(f.read(reader.data_offset))
    table = [[t.name, t.tensor_type.name, int(t.data_offset), int(t.n_bytes)]
             for t in reader.tensors]  # fmt: skip
    (out / f"{role}.json").write_text(json.dumps(
        {"source": str(path), "file_size": Path(path).stat().st_size, "tensors": table}))  # fmt: skip
    print(f"{role}: {path} -> {out / role}.head ({reader.data_offset} bytes), {len(table)} tensors")


def save_skeletons(out: Path) -> None:
    """The default pair's skeletons (`skeleton`) into out/small.*, out/large.*."""
    from harness.backends import models

    for role, name in (("small", models.DEFAULT_SMALL), ("large", models.DEFAULT_LARGE)):
        skeleton(models.assemble_gguf(name), out, role)


def random_gguf(skeletons: Path, role: str, dest: Path, seed: int = 0) -> Path:
    """A GGUF file of the skeleton's header with random tensors of the same types and sizes."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    meta = json.loads((skeletons / f"{role}.json").read_text())
    rng = np.random.default_rng(seed)
    with open(dest, "wb") as f:
        f.write((skeletons / f"{role}.head").read_bytes())
        for name, kind, offset, nbytes in meta["tensors"]:
            if kind in ("F32", "F16"):
                dt = np.float32 if kind == "F32" else np.float16
                n = nbytes // np.dtype(dt).itemsize
                ones = name.endswith("norm.weight")  # norms near 1, the rest small
                data = np.ones(n, dt) if ones else (rng.standard_normal(n) * 0.02).astype(dt)
            elif kind in SCALES:
                block = GGML_QUANT_SIZES[GGMLQuantizationType[kind]][1]
                data = rng.integers(0, 256, nbytes, dtype=np.uint8).reshape(-1, block)
                for at in SCALES[kind]:
                    data[:, at : at + 2] = np.frombuffer(
                        np.float16(SCALE[kind]).tobytes(), np.uint8
                    )
            else:
                raise SystemExit(f"{role}: tensor {name} has type {kind}; random_gguf knows "
                                 f"{sorted(SCALES)}, F32 and F16")  # fmt: skip
            f.seek(offset)
            f.write(data.tobytes())
        f.truncate(meta["file_size"])
    return dest


class WorkerBackend:
    """A backend whose passes run in `benchmarks/device_llamacpp_worker.py`, a process of its own
    that never imports torch (a CUDA llama.cpp and torch crash in one process there): the
    core's `Shadowed` models only need each pass done, not its logits. A pass's time includes
    one round trip over the pipe (`ping_ms`)."""

    def __init__(self, path: Path, info, n_gpu_layers: int, threads: int):
        import subprocess
        import sys

        worker = Path(__file__).with_name("device_llamacpp_worker.py")
        cmd = [sys.executable, str(worker), str(path), str(n_gpu_layers), str(threads)]
        self.name = path.name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = self._answer()
        self.n_vocab, self.version = hello["n_vocab"], hello["version"]
        self.info, self.threads = info, threads
        t0 = time.perf_counter()
        for _ in range(100):
            self.call(op="crop", n=1 << 30)
        self.ping_ms = 10 * (time.perf_counter() - t0)

    def _answer(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the llama.cpp worker for {self.name} ended")
            if line.startswith("{"):  # anything else on stdout is not the worker's answer
                out = json.loads(line)
                if "error" in out:
                    raise RuntimeError(out["error"])
                return out

    def call(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def forward(self, ids: list[int], n_rows: int, hidden: bool = False):
        self.call(op="forward", ids=list(ids), n_rows=n_rows)
        return None, None

    def reset(self) -> None:
        self.call(op="crop", n=0)

    def crop(self, n: int) -> None:
        self.call(op="crop", n=n)

    def sync(self) -> None:  # a forward answers once its logits are on the CPU
        pass


def shadow_llamacpp(skeletons: Path, role: str, device: str, threads: int, where: Path):
    """A random-weights GGUF of the skeleton's shape in a llama.cpp worker process: every layer
    on the GPU if `device` is cuda, else on the CPU. Its sizes (`info`) are read from the file
    as the project's llama.cpp backend reads them."""
    from harness.backends.llamacpp import _gguf_sizes
    from harness.core.records import ModelInfo

    path = random_gguf(skeletons, role, where / f"{role}-random.gguf")
    gpu = device.startswith("cuda")
    info = ModelInfo(name=role, source=f"{skeletons / role} (random weights)", device=device,
                     **_gguf_sizes(path, False))  # fmt: skip
    # a model with every layer on the GPU gets one CPU thread (its CPU work is the token
    # embedding lookup), so that its threads do not wait for work beside small's
    backend = WorkerBackend(path, info, -1 if gpu else 0, 1 if gpu else threads)
    backend.info = dataclasses.replace(info, backend=f"llama.cpp {backend.version}")
    return backend
