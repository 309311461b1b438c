"""One GGUF model in a process of its own, for `benchmarks/device_latency.py --engine llama.cpp`.

On the lent GPU machine a CUDA build of llama-cpp-python and PyTorch crashed in one process, in
either import order (a segfault in llama.cpp's model loading after `import torch`; "free():
invalid pointer" in `import torch` after llama_cpp). Most likely cause, not proven: each brings
its own copy of libgomp, the CUDA runtime and cuBLAS under the same sonames (torch's from its
wheels, llama.cpp's from /usr/local/cuda and the system), and the process keeps whichever loaded
first (seen in /proc/self/maps). So the model runs here, in a process that
never imports torch, and device_latency's `WorkerBackend` drives it over a pipe. The passes are
the project's llama.cpp backend's for one sequence (`harness/backends/llamacpp.py`: one
`llama_decode` per 512 tokens, logits asked for the last n_rows positions and copied out to
the CPU, cache cropped with `llama_memory_seq_rm`), written again here because that module
imports torch.

    python3 device_llamacpp_worker.py MODEL.gguf N_GPU_LAYERS THREADS [N_CTX]

Reads JSON lines on stdin: {"op": "forward", "ids": [...], "n_rows": k}, {"op": "crop", "n": n},
{"op": "threads", "n": t}; answers each with one JSON line on stdout after the work is done
(a forward's answer comes after its logits are on the CPU).
"""

import ctypes
import json
import sys

import llama_cpp as L
import numpy as np
from llama_cpp import _logger

N_BATCH = 512


def main() -> None:
    path, n_gpu_layers, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    n_ctx = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
    _logger.set_verbose(False)
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = n_gpu_layers
    model = L.llama_model_load_from_file(path.encode(), mp)
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, N_BATCH, N_BATCH, 1
    cp.n_threads = cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp) if model else None
    if not ctx:
        print(json.dumps({"error": f"llama.cpp could not load {path}"}), flush=True)
        return
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    mem, batch, length = L.llama_get_memory(ctx), L.llama_batch_init(N_BATCH, 0, 1), 0
    print(json.dumps({"n_vocab": n_vocab, "version": L.__version__,
                      "gpu_offload": bool(L.llama_supports_gpu_offload())}), flush=True)  # fmt: skip
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "forward":
            ids, n_rows = req["ids"], req["n_rows"]
            rows = []
            for start in range(0, len(ids), N_BATCH):
                chunk = ids[start : start + N_BATCH]
                for i, tok in enumerate(chunk):
                    batch.token[i], batch.pos[i] = tok, length + start + i
                    batch.n_seq_id[i], batch.seq_id[i][0] = 1, 0
                    batch.logits[i] = start + i >= len(ids) - n_rows
                batch.n_tokens = len(chunk)
                if L.llama_decode(ctx, batch) != 0:
                    print(json.dumps({"error": "llama_decode failed"}), flush=True)
                    return
                for i in range(len(chunk)):
                    if batch.logits[i]:
                        ptr = ctypes.cast(
                            L.llama_get_logits_ith(ctx, i), ctypes.POINTER(ctypes.c_float)
                        )
                        rows.append(np.ctypeslib.as_array(ptr, (n_vocab,)).copy())
            length += len(ids)
            print(json.dumps({"rows": len(rows)}), flush=True)
        elif req["op"] == "crop":
            if req["n"] < length:
                L.llama_memory_seq_rm(mem, 0, req["n"], -1)
                length = req["n"]
            print("{}", flush=True)
        elif req["op"] == "threads":
            L.llama_set_n_threads(ctx, req["n"], req["n"])
            print("{}", flush=True)


if __name__ == "__main__":
    main()
