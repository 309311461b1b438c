"""Real-model check of the remote large model: llama-server serves the large GGUF, small runs
locally in transformers, and each router's output is compared with the server's own greedy
completion, token for token.

    flock /tmp/hybridbench-heavy.lock python -m benchmarks.remote_check --prompts 3 --tokens 48 \\
        --threads 2 --routers oracle speculative large

The large model is the packaged Qwen2.5-Coder-1.5B-Instruct GGUF as assembled by
`harness.backends.models.assemble_gguf` (the quantized file itself: llama.cpp serves it as is), the small
model the dense bfloat16 copy of the 0.5B. Prompts are the first GSM8K test-split examples with
the project's chat prompt. The server listens on 127.0.0.1 only and is stopped at the end.
Prints, per router and prompt: equal or not, tokens, large round trips, rows, bytes, seconds.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def start_server(binary: str, gguf: str, threads: int, log: Path, args=("--poll", "0"), n_ctx=4096):
    """Start `llama-server -m gguf` on a free local port with `args` added (default: no busy-wait,
    since torch shares the cores); (process, port) once /health answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "-c", str(n_ctx)]
    cmd += ["-np", "1", "-t", str(threads), "--no-warmup", *args]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"llama-server did not start; see {log}")


def main() -> int:
    import torch

    from harness.backends import models
    from harness.backends.engine import remote_engine
    from harness.core.loop import DecodeConfig
    from routers import get_router
    from tasks import get_task

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-bin", default=str(models.cache_dir() / "bin" / "llama-server"))
    ap.add_argument("--gguf", default=None, help="default: the packaged large model's GGUF")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--routers", nargs="+", default=["oracle", "speculative", "large"])
    ap.add_argument("--log", default="runs/llama-server.log")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    gguf = a.gguf or str(models.assemble_gguf(models.DEFAULT_LARGE))
    proc, port = start_server(a.server_bin, gguf, a.threads, ROOT / a.log)
    ok = True
    try:
        url = f"http://127.0.0.1:{port}"
        engine = remote_engine(url, models.DEFAULT_SMALL, dtype="bfloat16", timeout_s=120.0)
        large = engine.backends["large"]
        print(f"large: {large.info.source} n_params={large.info.n_params}; small: local bf16")
        examples = get_task("gsm8k").split("test")[: a.prompts]
        for ex in examples:
            ids = engine.encode(ex.messages)
            t0 = time.perf_counter()
            ref = large.completion(ids, a.tokens)
            ref_s = time.perf_counter() - t0
            eos = set(engine.eos_ids)
            ref = ref[: next((i for i, t in enumerate(ref) if t in eos), len(ref))]
            print(f"\n{ex.id}: server greedy {len(ref)} tokens in {ref_s:.1f} s")
            for name in a.routers:
                before = dict(vars(large.stats))
                gen = engine.generate(get_router(name), ids, DecodeConfig(max_new_tokens=a.tokens))
                s = {k: v - before[k] for k, v in vars(large.stats).items() if k != "errors"}
                same = list(gen.token_ids) == ref
                ok &= same
                print(
                    f"  {name:<12} equal={same} tokens={len(gen.token_ids)} "
                    f"large_tokens={sum(gen.provenance)} round_trips={s['round_trips']} "
                    f"rows={s['rows']} sent={s['bytes_sent']}B recv={s['bytes_received']}B "
                    f"retries={s['retries']} {gen.seconds:.1f} s"
                )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print("\nALL EQUAL" if ok else "\nMISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
