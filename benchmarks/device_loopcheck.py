"""Where an eager transformers pass of the large model spends its time on a GPU (`docs/gpu.md`): the project's `HFBackend.forward` against the same call written out,
`no_grad`, transformers' own eager `generate`, and one CPU thread, 200 one-token passes each
after a 160-token prompt, random weights of the config's shape.

    python -m benchmarks.device_loopcheck CONFIGS_DIR     # CONFIGS_DIR/large/config.json
"""

import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from benchmarks.device_shadows import shadow
from harness.backends.hf import returned_cache

N, P = 200, 160
b = shadow(Path(sys.argv[1]), "large", "cuda")
m = b.model
print("attn", m.config._attn_implementation, flush=True)


def run(label, step):
    for _ in range(2):  # the second repeat is the one printed
        b.reset()
        step([(7 * i) % 100 + 10 for i in range(P)])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(N):
            step([11])
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    print(f"{label}: {1000 * dt / N:.2f} ms/token", flush=True)


run("backend.forward", lambda ids: b.forward(ids, 1))


@torch.inference_mode()
def raw(ids, cpu=True):
    out = m(input_ids=torch.tensor([ids], device="cuda"), use_cache=True, logits_to_keep=1,
            **{b.cache_kwarg: b.cache})  # fmt: skip
    b.cache = returned_cache(out)
    last = out.logits[0, -1:]
    return last.float().cpu() if cpu else last.argmax(-1)


@torch.no_grad()
def nograd(ids):
    out = m(input_ids=torch.tensor([ids], device="cuda"), use_cache=True, logits_to_keep=1,
            **{b.cache_kwarg: b.cache})  # fmt: skip
    b.cache = returned_cache(out)
    return out.logits[0, -1:].float().cpu()


def reset():
    b.cache = DynamicCache()


b.reset = reset
run("raw, logits to cpu", raw)
run("raw, argmax on gpu", lambda ids: raw(ids, cpu=False))
run("no_grad instead of inference_mode", nograd)
ids = torch.arange(P, device="cuda")[None] % 100 + 10
for _ in range(2):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    m.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False)
    torch.cuda.synchronize()
print(f"generate eager: {1000 * (time.perf_counter() - t0) / N:.2f} ms/token", flush=True)
torch.set_num_threads(1)
run("backend.forward, 1 CPU thread", raw)
