"""Speculative decoding on the real pair, side by side with transformers' assisted generation.

    flock /tmp/hybridbench-heavy.lock python -m benchmarks.speculative_vs_assisted \\
        --prompts 20 --max-new-tokens 128 --k 4 --threads 2 --out runs/speculative/bench_spec.json

On the first N gsm8k test prompts (chat template applied), greedy, the same max_new_tokens and
the same EOS ids (<|endoftext|>, <|im_end|>) for every method, one prompt at a time:

  ours       this project's core with the `speculative` router (small drafts, large verifies)
  hf         transformers: large.generate(ids, assistant_model=small, do_sample=False)
  reference  large's plain greedy output: large.generate(ids, do_sample=False)
             (or `--reference records:PATH`, the token ids of a `hybridbench run --router large`
             records file over the same prompts, compared on the first max_new_tokens tokens)

It prints, per prompt, whether ours == reference and ours == hf token for token (with the first
differing position and large's top-2 logit margin there, so a bf16 near-tie shows as such), and
the end-to-end tok/s of ours and hf (prefill included for both, EOS not counted) and their ratio.
The methods run interleaved per prompt so that load from other processes hits both alike.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--k", type=int, default=4, help="draft length of ours")
    p.add_argument("--adaptive", action="store_true", help="ours with HF's heuristic k schedule")
    p.add_argument("--reference", default="hf", help="hf | records:PATH | none")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--dtype", default="bfloat16", help="bfloat16 | float32 (float32 removes bf16 near-ties)"
    )
    p.add_argument("--out", default=None, help="write per-prompt results as JSON here")
    args = p.parse_args(argv)

    import torch

    from harness.backends.engine import Engine
    from harness.core.loop import DecodeConfig
    from routers.speculative import Speculative
    from tasks import get_task

    torch.set_num_threads(args.threads)
    engine = Engine.load(dtype=args.dtype)
    small, large = engine.backends["small"].model, engine.backends["large"].model
    examples = get_task("gsm8k").split("test")[: args.prompts]
    eos = engine.eos_ids
    cfg = DecodeConfig(max_new_tokens=args.max_new_tokens, eos_ids=eos)
    router = Speculative(k=args.k, adaptive=args.adaptive, schedule="heuristic")
    reference = _reference_records(args.reference, examples)

    def hf(ids, assistant):
        x = torch.tensor([ids])
        kw = {"assistant_model": small} if assistant else {}
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = large.generate(
                x,
                do_sample=False,
                max_new_tokens=args.max_new_tokens,
                eos_token_id=list(eos),
                pad_token_id=engine.tokenizer.pad_token_id,
                **kw,
            )
        secs = time.perf_counter() - t0
        toks = out[0, len(ids) :].tolist()
        return (toks[:-1] if toks and toks[-1] in eos else toks), secs

    warm = engine.encode(examples[0].messages)
    engine.generate(router, warm, DecodeConfig(max_new_tokens=8, eos_ids=eos))  # warm-up
    hf(warm, True)

    rows = []
    for ex in examples:
        ids = engine.encode(ex.messages)
        g = engine.generate(router, ids, cfg)
        ours = list(g.token_ids)
        theirs, hf_s = hf(ids, True)
        if args.reference == "hf":
            ref = hf(ids, False)[0]
        elif reference is not None:
            ref = reference[ex.id][: args.max_new_tokens]
        else:
            ref = None
        row = {
            "id": ex.id,
            "tokens_ours": len(ours),
            "tokens_hf": len(theirs),
            "seconds_ours": g.seconds,
            "seconds_hf": hf_s,
            "steps_ours": len(g.steps),
            "accepted_ours": sum(s.kept for s in g.steps),
            "drafted_ours": sum(s.drafted for s in g.steps),
            "ours_eq_hf": ours == theirs,
            "ours_eq_reference": None if ref is None else ours == ref,
            "hf_eq_reference": None if ref is None else theirs == ref,
        }
        if ref is not None and ours != ref:
            row["divergence"] = _divergence(engine, ids, ours, ref)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    summary = _summary(rows, args)
    print(_table(summary, rows))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=2))
    return 0


def _reference_records(spec: str, examples) -> dict | None:
    if not spec.startswith("records:"):
        return None
    recs = {}
    for line in Path(spec.split(":", 1)[1]).read_text().splitlines():
        r = json.loads(line)
        if not r.get("error"):
            recs[r["example_id"]] = r["generation"]["token_ids"]
    missing = [ex.id for ex in examples if ex.id not in recs]
    if missing:
        raise SystemExit(f"reference records lack {len(missing)} prompts, e.g. {missing[0]}")
    return recs


def _divergence(engine, ids, ours, ref) -> dict:
    """First differing position and large's top-2 logit margin there (one forward pass)."""
    import torch

    i = next((j for j, (a, b) in enumerate(zip(ours, ref, strict=False)) if a != b), None)
    if i is None:  # one is a prefix of the other: they differ in length (EOS or budget)
        return {"position": min(len(ours), len(ref)), "kind": "length"}
    with torch.inference_mode():
        logits = engine.backends["large"].model(torch.tensor([ids + ref[:i]])).logits[0, -1]
    top = torch.topk(logits.float(), 2)
    return {
        "position": i,
        "kind": "token",
        "ours": ours[i],
        "reference": ref[i],
        "large_top2_margin": float(top.values[0] - top.values[1]),
    }


def _summary(rows, args) -> dict:
    tok_o = sum(r["tokens_ours"] for r in rows)
    tok_h = sum(r["tokens_hf"] for r in rows)
    sec_o = sum(r["seconds_ours"] for r in rows)
    sec_h = sum(r["seconds_hf"] for r in rows)
    with_ref = [r for r in rows if r["ours_eq_reference"] is not None]
    return {
        "prompts": len(rows),
        "dtype": args.dtype,
        "max_new_tokens": args.max_new_tokens,
        "k": args.k,
        "adaptive": args.adaptive,
        "reference": args.reference,
        "threads": args.threads,
        "ours_eq_hf": sum(r["ours_eq_hf"] for r in rows),
        "ours_eq_reference": sum(bool(r["ours_eq_reference"]) for r in with_ref),
        "hf_eq_reference": sum(bool(r["hf_eq_reference"]) for r in with_ref),
        "compared_with_reference": len(with_ref),
        "tok_s_ours": tok_o / sec_o,
        "tok_s_hf": tok_h / sec_h,
        "ratio_ours_over_hf": (tok_o / sec_o) / (tok_h / sec_h),
        "acceptance_ours": sum(r["accepted_ours"] for r in rows)
        / max(1, sum(r["drafted_ours"] for r in rows)),
    }


def _table(s, rows) -> str:
    n = s["prompts"]
    lines = [
        f"speculative decoding, gsm8k test prompts 1..{n}, greedy, max_new_tokens="
        f"{s['max_new_tokens']}, ours k={s['k']}{' adaptive' if s['adaptive'] else ''}, "
        f"threads={s['threads']}",
        f"ours == large greedy ({s['reference']}): {s['ours_eq_reference']}/"
        f"{s['compared_with_reference']} prompts token for token",
        f"hf assisted == large greedy: {s['hf_eq_reference']}/{s['compared_with_reference']}",
        f"ours == hf assisted: {s['ours_eq_hf']}/{n}",
        f"tok/s ours {s['tok_s_ours']:.2f}, hf assisted {s['tok_s_hf']:.2f}, "
        f"ratio ours/hf = {s['ratio_ours_over_hf']:.3f}x (draft acceptance ours "
        f"{s['acceptance_ours']:.3f})",
    ]
    for r in rows:
        if "divergence" in r:
            lines.append(f"  {r['id']}: differs from reference: {r['divergence']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
