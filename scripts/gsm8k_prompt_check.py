"""Does a step-by-step prompt make the small model better at gsm8k? (README, Known issues.)

    flock /tmp/hybridbench-heavy.lock python scripts/gsm8k_prompt_check.py --n 8 A B

Greedy, small model alone (plain `transformers` generate, 256 new tokens), on the first N gsm8k
*train* examples, scored with the task's own scorer. Prompt variants: `current` (tasks/gsm8k.py)
and two reasoning-first wordings, A and B. Prints each completion's tail and, per variant, the
number correct, mean completion tokens and seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

VARIANTS = {
    "A": "{question}\n\nSolve this step by step. Then write the final answer on its own last "
    'line in the form "#### <number>".',
    "B": 'Question: {question}\nLet\'s think step by step, and end with a final line "#### <number>".',
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variants", nargs="+", help="current | A | B")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)

    import torch

    from harness.backends import models
    from tasks import gsm8k

    torch.set_num_threads(args.threads)
    m = models.load_model(models.DEFAULT_SMALL, role="small", device="cpu", dtype="bfloat16")
    task = gsm8k.GSM8K()
    examples = task.split("train")[: args.n]
    prompts = {**VARIANTS, "current": gsm8k.FIRST_RELEASE_PROMPT}  # the prompt of that check
    for name in args.variants:
        correct, tokens, t0 = 0.0, 0, time.perf_counter()
        for ex in examples:
            question = ex.meta["question"]
            text = prompts[name].format(question=question)
            ids = m.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}],
                add_generation_prompt=True,
                return_tensors="pt",
                return_dict=True,
            )
            out = m.model.generate(**ids, max_new_tokens=256, do_sample=False)
            new = out[0, ids["input_ids"].shape[1] :]
            completion = m.tokenizer.decode(new, skip_special_tokens=True)
            score = task.score(ex, completion)["exact_match"]
            correct, tokens = correct + score, tokens + len(new)
            print(
                f"{name} gold={ex.reference} score={score} tail={completion[-100:]!r}", flush=True
            )
        print(
            f"VARIANT {name}: {correct:g}/{len(examples)} correct, "
            f"{tokens / len(examples):.1f} tokens per completion, {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
