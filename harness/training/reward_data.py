"""`hybridbench reward-data`: synthesize the reward model's preference pairs (seed paper §2.1.2).

    hybridbench reward-data --out runs/reward/data --prompts 48 --max-new-tokens 64 --threads 2

1. Prompt space: an equal share of prompts from each of several tasks' `train` splits (default
   gsm8k, mbpp, mmlu, arc_challenge, commonsense_qa), drawn with a seeded RNG.
2. Responses: for every prompt one response from small and one from large, each in sampling mode
   with its own temperature ~ U(--temperature) and top-p ~ U(--top-p), drawn per generation,
   up to --max-new-tokens (0: the task's own budget and stop strings, i.e. full responses).
   Both come from the project's decoding core (`Engine.generate` with the `small` / `large`
   routers), never from a second decode loop. The chunks (3.) use no token past the shorter
   response, so large, decoded after small, stops at small's length (`capped`): the same
   tokens as its full response up to there, none of the rest. Its record keeps
   large[:len(small)] whenever large ran that far (stop_reason "small's length"), capped or not,
   so the file does not depend on which large jobs started after their small one had ended.
3. Chunks: each response pair is cut at up to `--chunks` distinct lengths L drawn uniformly from
   1 .. min(len(small), len(large)); a chunk is the first L tokens of each response after the
   prompt, so the small and large chunk of one pair always have the same token length.
   chosen = large's chunk, rejected = small's chunk.

Everything random is drawn from `random.Random(f"{seed}/{example id}")`, so a prompt's record
does not depend on which prompts came before it: a resumed run writes the same file.

Files in --out:
  manifest.json  what was asked (identity checked on resume) and the prompt ids drawn
  pairs.jsonl    one line per prompt, appended and fsync'ed as each finishes:
      {"id", "task", "prompt_ids": [...],
       "small": {"ids": [...], "temperature", "top_p", "seed", "stop_reason"}, "large": {...},
       "chunks": [{"length": L, "chosen": large ids[:L], "rejected": small ids[:L]}, ...]}
"""

from __future__ import annotations

import gzip
import json
import os
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.backends.engine import engine_from_args
from harness.backends.model_spec import ModelSpec
from harness.errors import UserError
from harness.training.common import nothing_to_do

DATA_MANIFEST = "manifest.json"  # a reward data folder's manifest (not a run folder's)

DEFAULT_TASKS = ("gsm8k", "mbpp", "mmlu", "arc_challenge", "commonsense_qa")


@dataclass(frozen=True)
class SynthConfig:
    """How responses are sampled and cut."""

    max_new_tokens: int = 64  # response length cap for both models; 0 = each task's own budget
    #                           and stop strings (full responses, as `hybridbench run` decodes)
    chunks: int = 16  # chunk lengths drawn per response pair (fewer if the pair is shorter)
    temperature: tuple[float, float] = (0.2, 1.0)  # uniform range, drawn per generation
    top_p: tuple[float, float] = (0.8, 1.0)  # uniform range, drawn per generation
    seed: int = 0  # seeds every draw (with the example id)


def sample_prompts(tasks: list[str], n: int, seed: int, split_seed: int = 0) -> list[tuple]:
    """(task name, Example) pairs: n prompts, an equal share (±1) from each task's train split,
    interleaved task by task. Example: 3 tasks, n=5 -> 2, 2, 1 prompts."""
    from tasks import get_task

    picks = []
    for i, name in enumerate(tasks):
        share = n // len(tasks) + (i < n % len(tasks))
        pool = get_task(name).split("train", seed=split_seed)
        if share > len(pool):
            raise UserError(f"task {name} has {len(pool)} train examples; asked for {share}")
        picks.append([(name, ex) for ex in random.Random(f"{seed}/{name}").sample(pool, share)])
    return [p for group in _interleave(picks) for p in group]


def _interleave(groups: list[list]) -> list[list]:
    width = max((len(g) for g in groups), default=0)
    return [[g[i] for g in groups if i < len(g)] for i in range(width)]


def chunk_lengths(n_small: int, n_large: int, k: int, rng: random.Random) -> list[int]:
    """Up to k distinct lengths in 1..min(n_small, n_large), ascending; [] if a response is empty."""
    m = min(n_small, n_large)
    return sorted(rng.sample(range(1, m + 1), min(k, m)))


def synthesize_one(engine, task: str, example, cfg: SynthConfig) -> dict:
    """Sample one small and one large response to `example` and cut them into chunk pairs."""
    head, (small, large), rng = _plan(engine, task, example, cfg)
    gens = {"small": engine.generate(small.router, small.prompt_ids, small.cfg)}
    large = capped(large, gens["small"])
    gens["large"] = engine.generate(large.router, large.prompt_ids, large.cfg)
    return _finish(head, gens, cfg, rng)


SMALLS_LENGTH = "small's length"  # stop reason of a large response kept only up to small's length


def capped(large_job, small_gen):
    """`large_job` decoding no further than small's response: the chunks stop there."""
    from dataclasses import replace

    n = max(1, len(small_gen.token_ids))
    return replace(
        large_job, cfg=replace(large_job.cfg, max_new_tokens=min(large_job.cfg.max_new_tokens, n))
    )


def _plan(engine, task: str, example, cfg: SynthConfig):
    """(record head, the two generation jobs, the rng the chunk lengths draw from next)."""
    from harness.core.loop import DecodeConfig
    from harness.core.scheduler import Job
    from routers.baselines import LargeOnly, SmallOnly
    from tasks import get_task

    rng = random.Random(f"{cfg.seed}/{example.id}")
    prompt_ids = engine.encode(list(example.messages))
    budget, stop = cfg.max_new_tokens, ()
    if budget == 0:
        t = get_task(task)
        budget, stop = t.max_new_tokens, tuple(t.stop)
    head = {"id": example.id, "task": task, "prompt_ids": prompt_ids}
    jobs = []
    for role, router in (("small", SmallOnly()), ("large", LargeOnly())):
        settings = {
            "temperature": round(rng.uniform(*cfg.temperature), 4),
            "top_p": round(rng.uniform(*cfg.top_p), 4),
            "seed": rng.randrange(2**31),
        }
        head[role] = settings
        dc = DecodeConfig(max_new_tokens=budget, stop=stop, **settings)
        jobs.append(Job((example.id, role), prompt_ids, dc, router))
    return head, jobs, rng


def _finish(head: dict, gens: dict, cfg: SynthConfig, rng: random.Random) -> dict:
    out = dict(head)
    for role in ("small", "large"):
        g = gens[role]
        out[role] = {"ids": list(g.token_ids), **head[role], "stop_reason": g.stop_reason}
    small, large = out["small"]["ids"], out["large"]["ids"]
    # large as a capped job decodes it (`capped`): up to small's length, none of it after an
    # empty small response (which gives no chunk either way)
    if len(large) >= len(small):
        large = out["large"]["ids"] = large[: len(small)]
        out["large"]["stop_reason"] = SMALLS_LENGTH
    out["chunks"] = [
        {"length": n, "chosen": large[:n], "rejected": small[:n]}
        for n in chunk_lengths(len(small), len(large), cfg.chunks, rng)
    ]
    return out


def job_order(pairs: list[list], block: int) -> list:
    """The (small, large) job pairs of each prompt in the order they are decoded: block by block
    of `block` prompts, the block's small jobs then its large ones, so that the generations in
    flight mostly wait on one model and each batched call is full of its rows (mixed, every call
    carried half a batch; large's calls cost nearly as much half full as full). A record needs
    both of its prompt's responses, so an interruption loses at most about one block.
    Example: block 2, prompts a, b, c -> a.small, b.small, a.large, b.large, c.small, c.large."""
    out = []
    for i in range(0, len(pairs), max(1, block)):
        part = pairs[i : i + max(1, block)]
        out += [js[0] for js in part] + [js[1] for js in part]
    return out


def synthesize(engine, prompts: list[tuple], cfg: SynthConfig, path: Path) -> int:
    """Append a record for every (task, example) not yet in `path`, decoding `engine.batch`
    generations at a time; returns how many were added."""

    done = {r["id"] for r in read_pairs(path)}
    todo = [(t, ex) for t, ex in prompts if ex.id not in done]
    print(
        f"{path}: {len(prompts) - len(todo)} of {len(prompts)} prompts done, {len(todo)} to go",
        file=sys.stderr,
    )
    plans = {ex.id: _plan(engine, t, ex, cfg) for t, ex in todo}
    jobs = job_order([js for _, js, _ in plans.values()], 2 * engine.batch)
    gens: dict[str, dict] = {}

    def small_of(job):
        return gens.get(job.key[0], {}).get("small")

    def lazily():
        """The jobs in `job_order`, except that of a block's large jobs the next one taken is
        one whose small response has ended, where there is one, capped at its length."""
        i = 0
        while i < len(jobs):
            if jobs[i].key[1] == "small":
                yield jobs[i]
                i += 1
                continue
            block = []
            while i < len(jobs) and jobs[i].key[1] == "large":
                block.append(jobs[i])
                i += 1
            while block:
                job = next((j for j in block if small_of(j) is not None), block[0])
                block.remove(job)
                yield capped(job, small_of(job)) if small_of(job) is not None else job

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        each = engine.generate_each(None, lazily(), "reward-data", unit="response", total=len(jobs))
        for job, gen in each:
            ex_id, role = job.key
            gens.setdefault(ex_id, {})[role] = gen
            if len(gens[ex_id]) == 2:
                head, _, rng = plans[ex_id]
                f.write(json.dumps(_finish(head, gens.pop(ex_id), cfg, rng)) + "\n")
                f.flush()
                os.fsync(f.fileno())
    return len(todo)


def read_pairs(path: Path) -> list[dict]:
    """The records of a pairs.jsonl. A line cut by a crash is dropped from the file (that prompt
    is synthesized again on resume). A folder kept with the file compressed (pairs.jsonl.gz) has
    it decompressed back in place first, so resuming and training read the same bytes."""
    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    if not path.exists() and packed.is_file():
        path.write_bytes(gzip.decompress(packed.read_bytes()))
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    rows, good = [], []
    for line in lines:
        try:
            rows.append(json.loads(line))
            good.append(line)
        except json.JSONDecodeError:
            continue
    if len(good) != len(lines):
        path.write_text("".join(g + "\n" for g in good), encoding="utf-8")
    return rows


# --- command line ----------------------------------------------------------------------------


def parse_range(text: str) -> tuple[float, float]:
    """'0.2,1.0' -> (0.2, 1.0), a range LO,HI with 0 <= LO <= HI."""
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"expected a range LO,HI, got {text!r}") from None
    if not 0 <= lo <= hi:
        raise UserError(f"range {text!r} must satisfy 0 <= LO <= HI")
    return lo, hi


def _open(out: Path, manifest: dict) -> None:
    path = out / DATA_MANIFEST
    if path.exists():
        old = json.loads(path.read_text())
        diff = [k for k in manifest if old.get(k) != manifest[k]]
        if diff:
            raise UserError(f"{out} holds other data ({', '.join(diff)} differ); use another --out")
        return
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=1) + "\n")


@dataclass(frozen=True)
class PairsSpec:
    """One `hybridbench reward-data`: which prompts, how each pair of responses is drawn."""

    out: str  # data folder (created, or resumed)
    tasks: tuple[str, ...] = DEFAULT_TASKS  # the tasks whose train prompts are drawn
    prompts: int = 48  # prompts in all (an equal share per task)
    max_new_tokens: int = 64  # each response's budget (0: each task's own)
    chunks: int = 16  # chunk lengths per response pair
    temperature: tuple[float, float] = (0.2, 1.0)  # range LO, HI drawn per generation
    top_p: tuple[float, float] = (0.8, 1.0)  # range LO, HI drawn per generation
    seed: int = 0
    split_seed: int = 0  # the tasks' split seed (train split)
    models: ModelSpec = ModelSpec(batch="auto")  # the pair that answers


def make_pairs(spec: PairsSpec) -> int:
    """`hybridbench reward-data`: the preference pairs into OUT/pairs.jsonl (resumed)."""
    if spec.prompts < 1 or spec.max_new_tokens < 0 or spec.chunks < 1:
        raise UserError("--prompts and --chunks must be >= 1, --max-new-tokens >= 0")
    top_p, temperature = tuple(spec.top_p), tuple(spec.temperature)
    if not 0 < top_p[0] <= top_p[1] <= 1:
        raise UserError(f"--top-p range must lie in (0, 1], got {top_p[0]},{top_p[1]}")
    if not 0 <= temperature[0] <= temperature[1]:
        raise UserError(f"--temperature range must satisfy 0 <= LO <= HI, got {temperature}")
    cfg = SynthConfig(spec.max_new_tokens, spec.chunks, temperature, top_p, spec.seed)
    tasks = list(spec.tasks)
    prompts = sample_prompts(tasks, spec.prompts, spec.seed, spec.split_seed)
    out = Path(spec.out)
    identity = {
        "tasks": tasks,
        "prompts": spec.prompts,
        "split": "train",
        "split_seed": spec.split_seed,
        "config": asdict(cfg),
        "model_sources": {
            "small": spec.models.small,
            "large": spec.models.large,
            "dtype": spec.models.dtype,
        },
    }
    identity = json.loads(json.dumps(identity))
    _open(out, {**identity, "example_ids": [ex.id for _, ex in prompts]})
    done = {r["id"] for r in read_pairs(out / "pairs.jsonl")}
    if all(ex.id in done for _, ex in prompts):  # complete: no models to load, no cost to log
        nothing_to_do()
        added = 0
    else:
        added = synthesize(engine_from_args(spec.models), prompts, cfg, out / "pairs.jsonl")
    rows = read_pairs(out / "pairs.jsonl")
    n_chunks = sum(len(r["chunks"]) for r in rows)
    ties = sum(c["chosen"] == c["rejected"] for r in rows for c in r["chunks"])
    print(
        f"{out / 'pairs.jsonl'}: {len(rows)} prompts ({added} new), {n_chunks} chunk pairs, "
        f"{ties} with identical chosen and rejected tokens"
    )
    return 0
