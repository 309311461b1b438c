"""Critical-divergence token labels (R2R's, Fu et al. 2025) on a task's train split.

Along large's own greedy answer to each example, wherever small's greedy next token differs from
the token large wrote there (a divergence), large continues greedily from the prompt + its answer
up to there + small's token, and the task scores the continuation. The divergence is *critical*
when the continuation's outcome (`Task.outcome`: gsm8k's final number, a code task's tests'
verdict) differs from the outcome of large's own answer, else *neutral*. R2R asks an LLM to judge
whether the continuation still means the same; here the verifier is the task's scorer (no judge
of that size runs offline), so a divergence that changes the reasoning but reaches the same final
answer (or the same verdict) is neutral.

The labels are a token label file (`harness.training.labels`, mode "critical") whose trajectory
is large's answer: label 1 where small's token equals large's (source agree); at a rolled-out
divergence 0 when critical, 1 when neutral (sources critical, neutral); -1 (unlabelled) at a
divergence not rolled out. Only small is teacher-forced along the answer: large's greedy token
is the answer's own, its top-k is not measured (-1 ids, NaN probabilities). `train-r2r --target critical` learns the first; `--target oracle`
(every divergence) and `train-learned --target citer` read the same file.

Two seeded caps keep the cost known (`CriticalConfig`): `examples` of the train split and
`positions` rolled out per example. Large's answers of a group of examples are decoded together,
then all their continuations, `engine.batch` at a time. Into OUT, resumable per example:

  rollouts.jsonl      a header line (task, split seed, config), then one line per example as
                      its last continuation finishes: large's answer ids, its outcome, the
                      divergences and, per rolled-out one, position, small's token, the
                      continuation's outcome, critical (a rerun decodes only the others)
  labels.safetensors  the label file (+ labels.hidden.safetensors), rewritten after each group;
                      remade from rollouts.jsonl by teacher forcing alone when it is behind
  stats.json          written once every example is done: divergences, rolled out, critical share
  cost.jsonl          what each invocation cost (the command line's training log)

    hybridbench r2r-labels --task gsm8k --examples 200 --positions 3 --out results/r2r/labels-gsm8k
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from harness.core.forcing import FORCED_CHUNK
from harness.errors import UserError
from harness.training.labels import (
    AGREE,
    COLUMNS,
    LABEL_SOURCES,
    UNLABELLED,
    TokenLabels,
    _bar,
    _model_sources,
    _stable_hash,
    teacher_force,
)

CRITICAL, NEUTRAL = LABEL_SOURCES.index("critical"), LABEL_SOURCES.index("neutral")
RECORDS, LABELS, STATS = "rollouts.jsonl", "labels.safetensors", "stats.json"


@dataclass(frozen=True)
class CriticalConfig:
    """How critical-divergence labels are made; stored in the files they go into."""

    mode: str = "critical"  # (the label file's mode)
    examples: int = 0  # train examples labelled, a seeded choice; 0 = all of the split
    positions: int = 4  # divergences rolled out per example, a seeded choice; 0 = all
    max_new_tokens: int = 0  # large's answer budget, continuations included; 0 = the task's
    top_k: int = 5  # top-k ids/probabilities stored per model and position
    seed: int = 0  # seeds both choices
    chunk: int = FORCED_CHUNK  # positions per teacher-forcing forward pass


def pick_examples(train: list, n: int, seed: int) -> list:
    """`n` of the `train` examples (all when n is 0 or more than there are), a seeded choice kept
    in split order."""
    if not n or n >= len(train):
        return list(train)
    g = torch.Generator().manual_seed(seed)
    keep = sorted(torch.randperm(len(train), generator=g)[:n].tolist())
    return [train[i] for i in keep]


def pick_positions(diverge: torch.Tensor, cfg: CriticalConfig, example_id: str) -> list[int]:
    """At most `cfg.positions` of the divergent positions, a choice seeded by seed and example."""
    idx = torch.nonzero(diverge).flatten()
    if cfg.positions and len(idx) > cfg.positions:
        g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + _stable_hash(example_id))
        idx = idx[torch.randperm(len(idx), generator=g)[: cfg.positions]]
    return sorted(int(i) for i in idx)


def answer_text(engine, task, ids: list[int]) -> str:
    from harness.core.loop import cut_at_stop

    return cut_at_stop(engine.decode(list(ids)), task.stop)


def large_answers(engine, task, prompts: dict, budget: int) -> dict:
    """Large's greedy answer ids (its end-of-answer token appended where it stopped there) to
    each prompt (key -> prompt ids), decoded together."""
    from harness.core.loop import DecodeConfig
    from harness.core.router import LargeOnly
    from harness.core.scheduler import Job

    dc = DecodeConfig(max_new_tokens=budget, stop=tuple(task.stop), eos_ids=engine.eos_ids)
    jobs = [Job(key, list(p), dc) for key, p in prompts.items()]
    out = {}
    for job, g in engine.generate_each(LargeOnly(), jobs, "large answers", disable=len(jobs) < 2):
        out[job.key] = list(g.token_ids) + ([engine.eos_ids[-1]] if g.stop_reason == "eos" else [])
    return out


def continuations(engine, task, todo: list[tuple], budget: int):
    """Yields (key, outcome) of large continuing each prefix greedily, as each finishes: todo
    (key, example, prompt ids, answer ids up to the divergence, small's token). Small's token
    ending the answer (an end-of-answer token) ends it there, as does the budget: nothing is
    decoded."""
    from harness.core.loop import DecodeConfig
    from harness.core.router import LargeOnly
    from harness.core.scheduler import Job

    jobs, by_key = [], {}
    for key, ex, prompt, head, token in todo:
        left = budget - len(head) - 1
        if token in engine.eos_ids or left <= 0:  # the answer ends there, or its budget does
            yield key, task.outcome(ex, answer_text(engine, task, list(head) + [token]))
            continue
        dc = DecodeConfig(max_new_tokens=left, stop=tuple(task.stop), eos_ids=engine.eos_ids)
        jobs.append(Job(key, list(prompt) + list(head) + [token], dc))
        by_key[key] = (ex, list(head) + [token])
    for job, g in engine.generate_each(LargeOnly(), jobs, "continuations", unit="rollout"):
        ex, head = by_key[job.key]
        yield job.key, task.outcome(ex, answer_text(engine, task, head + list(g.token_ids)))


def small_forced(engine, prompt: list[int], answer: list[int], cfg: CriticalConfig) -> dict:
    """Small teacher-forced along large's answer (hidden states, greedy tokens, top-k). Large's
    greedy token at each position is the answer's own (large decoded it greedily from there),
    so large is not run again: its top-k columns hold -1 ids and NaN probabilities (not
    measured; a forced pass of large would cost about as much as the answer did)."""
    cols = teacher_force(engine.backends, prompt, answer, cfg.top_k, cfg.chunk, roles=("small",))
    n = len(answer)
    cols["large_token"] = torch.tensor(answer, dtype=torch.long)
    cols["large_topk_ids"] = torch.full((n, cfg.top_k), -1, dtype=torch.long)
    cols["large_topk_probs"] = torch.full((n, cfg.top_k), float("nan"))
    return cols


def label_columns(cols: dict, answer: list[int], record: dict, index: int) -> dict:
    """The label file's columns of one example: `cols` (teacher_force along its answer) and the
    labels its record says."""
    n = len(answer)
    ctx = torch.tensor(answer, dtype=torch.long)
    diverge = cols["small_token"] != ctx
    label = torch.where(diverge, -1, 1).to(torch.int8)
    source = torch.where(diverge, UNLABELLED, AGREE).to(torch.int8)
    for pos, _, _, critical in record["rolled"]:
        label[pos] = 0 if critical else 1
        source[pos] = CRITICAL if critical else NEUTRAL
    return cols | {
        "example": torch.full((n,), index, dtype=torch.int32),
        "position": torch.arange(n, dtype=torch.int32),
        "context_token": ctx,
        "label": label,
        "label_source": source,
    }


def label_group(engine, task, group: list[tuple], cfg: CriticalConfig, emit) -> None:
    """Label a group of (index, example): large's answers decoded together, then all their
    continuations; `emit(index, example, record, columns)` as soon as an example's last
    continuation is done (columns None for an empty answer: no rows)."""
    budget = cfg.max_new_tokens or task.max_new_tokens
    prompts = {i: engine.encode(ex.messages) for i, ex in group}
    answers = large_answers(engine, task, prompts, budget)
    planned, todo = {}, []
    for i, ex in group:
        answer = answers[i]
        cols = small_forced(engine, prompts[i], answer, cfg) if answer else None
        diverge = torch.zeros(0, dtype=torch.bool)
        if cols is not None:
            diverge = cols["small_token"] != torch.tensor(answer, dtype=torch.long)
        chosen = pick_positions(diverge, cfg, ex.id)
        for pos in chosen:
            todo.append(((i, pos), ex, prompts[i], answer[:pos], int(cols["small_token"][pos])))
        own = task.outcome(ex, answer_text(engine, task, answer))
        record = {"id": ex.id, "n_prompt": len(prompts[i]), "answer": answer, "outcome": own}
        record |= {"divergences": int(diverge.sum()), "rolled": []}
        planned[i] = (ex, record, cols, set(chosen))
    pending = {i: len(left) for i, (_, _, _, left) in planned.items()}

    def finish(i: int) -> None:
        ex, record, cols, _ = planned[i]
        record["rolled"].sort()
        labelled = None if cols is None else label_columns(cols, record["answer"], record, i)
        emit(i, ex, record, labelled)

    for i, n in pending.items():
        if n == 0:
            finish(i)
    for (i, pos), outcome in continuations(engine, task, todo, budget):
        _, record, cols, _ = planned[i]
        critical = int(outcome != record["outcome"])
        record["rolled"].append([pos, int(cols["small_token"][pos]), outcome, critical])
        pending[i] -= 1
        if pending[i] == 0:
            finish(i)


def _read_records(path: Path, header: dict) -> dict:
    """Example id -> record of rollouts.jsonl, whose header must be `header` (else a UserError);
    a file that does not exist is started with it."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(header) + "\n")
        return {}
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    if not lines or lines[0] != header:
        raise UserError(f"{path} was made with other settings; use another output folder")
    return {r["id"]: r for r in lines[1:]}


def header(task_name: str, cfg: CriticalConfig, split_seed: int) -> dict:
    """rollouts.jsonl's first line: what its records were made with."""
    return {
        "schema": "hybridbench.critical_rollouts/1",
        "task": task_name,
        "split_seed": split_seed,
        "config": asdict(cfg),
    }


def finished(out, head: dict, ids: list[str]) -> bool:
    """The folder `out` holds the labels of every one of `ids`, made with `head`'s settings (a
    mismatch is a UserError), and their stats.json."""
    out = Path(out)
    if not (out / RECORDS).exists():
        return False
    return (out / STATS).exists() and set(_read_records(out / RECORDS, head)) >= set(ids)


def build_critical(engine, task, examples, cfg: CriticalConfig, out, *, split_seed=0, group=None):
    """Critical-divergence labels of `examples` into the folder `out` (see the module docstring):
    resumes from what it holds; returns the label file's contents."""
    out = Path(out)
    records = _read_records(out / RECORDS, header(task.name, cfg, split_seed))
    ids = [ex.id for ex in examples]
    meta = {"mode": cfg.mode, "task": task.name, "split": "train", "split_seed": split_seed}
    meta |= {"example_ids": ids, "n_prompt": [0] * len(ids), "round": 1}
    meta |= {"models": _model_sources(engine), "config": asdict(cfg), "done": []}
    columns = {c: [] for c in COLUMNS}
    old = TokenLabels.load(out / LABELS) if (out / LABELS).exists() else None
    if old is not None and not (old.has_hidden and old.meta.get("config") == asdict(cfg)):
        old = None  # made again from the records
    kept = set(old.meta["done"]) & set(old.example_ids) if old is not None else set()
    # labelled examples with no label file to keep (a fresh machine): small's teacher-forced pass
    remake = sum(ex.id in records and ex.id not in kept for ex in examples)
    again = _bar(remake, "critical labels (made again from rollouts)", remake > 0)
    for i, ex in enumerate(examples):
        rec = records.get(ex.id)
        if rec is None:
            continue
        if ex.id in kept:
            rows = old.rows_of(old.example_ids.index(ex.id))
            cols = {c: old[c][rows] for c in COLUMNS}
            cols["example"] = torch.full_like(cols["example"], i)
        elif rec["answer"]:  # the record's labels, small's columns by teacher forcing
            prompt = engine.encode(ex.messages)
            cols = small_forced(engine, prompt, rec["answer"], cfg)
            cols = label_columns(cols, rec["answer"], rec, i)
        else:
            cols = None
        if again is not None and ex.id not in kept:
            again.update(1)
        _add(columns, meta, i, ex.id, cols, rec["n_prompt"])
    if again is not None:
        again.close()
    todo = [(i, ex) for i, ex in enumerate(examples) if ex.id not in records]
    group = group or max(8, 4 * engine.batch)
    bar = _bar(len(examples), "critical labels", True, len(examples) - len(todo))

    def emit(i, ex, rec, cols) -> None:  # an example done: its record first (what resumes)
        with (out / RECORDS).open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        _add(columns, meta, i, ex.id, cols, rec["n_prompt"])
        bar.update(1)

    for start in range(0, len(todo), group):
        label_group(engine, task, todo[start : start + group], cfg, emit)
        data = TokenLabels({c: torch.cat(v) for c, v in columns.items()}, meta)
        data.save(out / LABELS)
        bar.set_postfix(stats(data))
    bar.close()
    data = TokenLabels({c: torch.cat(v) for c, v in columns.items()}, meta)
    if not todo:
        data.save(out / LABELS)
    (out / STATS).write_text(json.dumps(stats(data), indent=1) + "\n")
    return data


def _add(columns: dict, meta: dict, i: int, example_id: str, cols, n_prompt: int) -> None:
    for c in COLUMNS:
        if cols is not None:
            columns[c].append(cols[c])
    meta["n_prompt"][i] = n_prompt
    meta["done"].append(example_id)


def stats(data: TokenLabels, examples=None) -> dict:
    """What the labels of `examples` (indices into the file's ids; default all) hold: tokens,
    divergences (small's token differs from large's answer's), those rolled out, the critical
    ones, their share of those rolled out, and the share of all tokens a critical-only oracle
    would defer (divergences / tokens x the critical share: estimated from the rolled-out ones)."""
    src = data["label_source"]
    if examples is not None:
        src = src[torch.isin(data["example"], torch.as_tensor(examples, dtype=torch.int32))]
    critical, neutral = int((src == CRITICAL).sum()), int((src == NEUTRAL).sum())
    rolled, divergences = critical + neutral, int((src != AGREE).sum())
    share = critical / rolled if rolled else float("nan")
    n = len(data.meta.get("done", [])) if examples is None else len(examples)
    return {
        "examples": n,
        "tokens": len(src),
        "divergences": divergences,
        "rolled_out": rolled,
        "critical": critical,
        "critical_share": share,
        "critical_token_share": divergences / len(src) * share if len(src) else float("nan"),
    }
