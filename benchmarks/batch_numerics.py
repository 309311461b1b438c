"""How much llama.cpp's logits for a sequence change when its call is batched with others.

    python -m benchmarks.batch_numerics --threads 2            # the packaged small and large models
    python -m benchmarks.batch_numerics --model path/to.gguf   # any GGUF

For a few chat prompts: the prefill and one decode step of each prompt (a) alone in a
one-sequence context, (b) alone in a B-sequence context, (c) batched with the other prompts in one
`llama_decode`. Prints the largest |logit difference| of (b) and (c) against (a), and how many
greedy tokens differ. (b) = 0 shows the context layout changes nothing; (c) is the effect of
llama.cpp's kernels on a multi-row batch (activations quantized per block, so a rounding
difference can move a quantization step). Greedy decoding flips where a top-2 margin is smaller.
"""

from __future__ import annotations

import argparse
import os

PROMPTS = [
    "What is 17*23? Think step by step.",
    "Name three rivers in Europe and their lengths.",
    "Write a haiku about CPUs.",
    "Explain what a KV cache is.",
    "Janet has 3 apples and buys 5 more. How many apples does she have?",
    "Write a Python function that reverses a string.",
    "Which planet is the largest in the solar system?",
    "Summarize the plot of Hamlet in two sentences.",
]


def measure(source: str, role: str, threads: int, b: int) -> list[str]:
    from harness.backends import models
    from harness.backends.llamacpp import LlamaCppBackend, gguf_info

    path, sha = models.gguf_file(source)
    tok = models.gguf_tokenizer(path, sha)
    prompts = []
    for q in PROMPTS[:b]:
        out = tok.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True
        )
        prompts.append(list(out["input_ids"] if hasattr(out, "keys") else out))
    info = gguf_info(path, role, source, sha)
    one = LlamaCppBackend(path, info, threads=threads, n_seq=1)
    many = LlamaCppBackend(path, info, threads=threads, n_seq=b)
    seqs = many.sequences(b)

    def alone(backend, p):
        backend.reset()
        first = backend.forward(p, 1)[0][0]
        return first, backend.forward([int(first.argmax())], 1)[0][0]

    ref = [alone(one, p) for p in prompts]
    solo = [alone(seqs[0], p) for p in prompts]
    for s in seqs:
        s.reset()
    pre = many.forward_batch([(s, p, 1, False) for s, p in zip(seqs, prompts, strict=True)])
    nxt = [int(first.argmax()) for first, _ in ref]
    dec = many.forward_batch([(s, [t], 1, False) for s, t in zip(seqs, nxt, strict=True)])
    rows = []
    for i in range(b):
        d = {
            "alone in a B-sequence context": max(
                float((solo[i][j] - ref[i][j]).abs().max()) for j in (0, 1)
            ),
            "batched prefill": float((pre[i][0][0] - ref[i][0]).abs().max()),
            "batched decode step": float((dec[i][0][0] - ref[i][1]).abs().max()),
        }
        flips = int(pre[i][0][0].argmax() != ref[i][0].argmax()) + int(
            dec[i][0][0].argmax() != ref[i][1].argmax()
        )
        rows.append(
            f"{role} prompt {i}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in d.items())
            + f"; greedy flips {flips}/2"
        )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", action="append", help="GGUF source(s); default the packaged pair")
    p.add_argument("--batch", type=int, default=4, help="sequences batched together (<= 8)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    from harness.backends import models

    sources = [(m, "model") for m in args.model or []] or [
        (models.DEFAULT_SMALL, "small"),
        (models.DEFAULT_LARGE, "large"),
    ]
    print(
        f"max |logit difference| against the same call alone in a one-sequence context, B={args.batch}"
    )
    for source, role in sources:
        for row in measure(source, role, args.threads, min(args.batch, len(PROMPTS))):
            print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
