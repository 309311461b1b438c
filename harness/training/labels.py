"""The shared token-level label dataset: where does small's next token suffice, where is large needed.

One row per position of an answer trajectory, computed by teacher forcing both models over
(prompt + trajectory) in a few batched forward passes. CITER's router trains on it, and the
reward-model pipeline can read the same file (hidden states, both models' tokens and top-k
probabilities, match labels). Build one with `build_labels`, read one with `TokenLabels.load`.

Trajectories and labels (`LabelConfig.mode`):

- "reference" (CITER's shortcut): the trajectory is the task's reference answer written the way
  the prompt asks for it (`Task.reference_answer`; gsm8k: the solution without its <<calculator>>
  annotations, ending "The final answer is \\boxed{N}."; mbpp: the gold code in a ```python
  block), then the end-of-turn token. At position i:
  small's greedy token == reference token -> label 1 (small suffices, source small_match);
  else large's greedy token == reference -> label 0 (large needed, source large_match);
  else both miss: a rollout decides, as in CITER's code: from prompt + reference[:i] + small's
  token, a rollout router (round 1: small alone; round 2: the trained CITER router) continues to
  the end (at most `rollout_tokens`, default the task's budget: a rollout cut short would score
  as wrong); the task scores the answer: correct -> 1, wrong -> 0 (source rollout). Rollouts of
  a group of examples are decoded together, `engine.batch` at a time. At most `max_rollouts` both-miss positions per example are rolled out (a
  seeded choice); the others keep label -1 (source unlabelled) and are not trained on.
- "label_free": the trajectory is small's own greedy answer (given, e.g. from a `hybridbench run
  --router small` records file, or decoded here); label 1 where small's greedy token equals
  large's greedy token (source agree), else 0 (disagree). No reference, no rollouts.

File format: safetensors (no pickle), N rows; `hidden` is written to a sibling file
(`labels_r1.safetensors` -> `labels_r1.hidden.safetensors`), all other columns to the file
itself. The hidden states are 90% of the bytes (300 MB for gsm8k's train split) and only
small's teacher-forced pass over the stored trajectory is needed to make them again, so the
rest can be kept (results/ in git) without them: a file whose sibling is missing or does not
match loads without `hidden`, and `build_labels` restores it when it resumes. Columns:

    example         int32 [N]     index into metadata["example_ids"]
    position        int32 [N]     index of the token in the trajectory (0 = first answer token)
    context_token   int64 [N]     the trajectory's token at this position (what was fed next)
    hidden          bf16  [N, H]  small's last hidden state at the position that predicts it
    small_token     int64 [N]     small's greedy (argmax) next token
    large_token     int64 [N]     large's greedy next token
    small_topk_ids  int64 [N, K]  small's K most likely next tokens, most likely first
    small_topk_probs f32  [N, K]  their probabilities (softmax at temperature 1)
    large_topk_ids  int64 [N, K]  the same for large
    large_topk_probs f32  [N, K]
    label           int8  [N]     1: small's token is good enough; 0: large needed; -1: unknown
    label_source    int8  [N]     index into LABEL_SOURCES

metadata (str -> JSON string): schema, mode, task, split, split_seed, example_ids, n_prompt
(prompt length per example), round, models (sources/dtypes), config (LabelConfig), done (ids
finished; a partial file resumes from there).

    python -c "from harness.training.labels import TokenLabels; d = TokenLabels.load('x.safetensors'); print(d.summary())"
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from harness.core.forcing import FORCED_CHUNK, forced_passes
from harness.errors import UserError

SCHEMA = "hybridbench.token_labels/1"
LABEL_SOURCES = (
    *("small_match", "large_match", "rollout", "agree", "disagree", "unlabelled"),
    *("critical", "neutral"),  # critical-divergence labels (harness.training.critical)
)
SMALL_MATCH, LARGE_MATCH, ROLLOUT, AGREE, DISAGREE, UNLABELLED = range(6)
COLUMNS = (
    "example",
    "position",
    "context_token",
    "hidden",
    "small_token",
    "large_token",
    "small_topk_ids",
    "small_topk_probs",
    "large_topk_ids",
    "large_topk_probs",
    "label",
    "label_source",
)


@dataclass(frozen=True)
class LabelConfig:
    """How labels are made; stored in the file's metadata."""

    mode: str = "reference"  # "reference" (CITER shortcut + rollouts) or "label_free"
    top_k: int = 5  # top-k ids/probabilities stored per model and position
    max_rollouts: int = 2  # both-miss positions rolled out per example (reference mode)
    rollout_tokens: int = 0  # cap on one rollout's new tokens; 0 = the task's own budget
    max_new_tokens: int = 0  # label_free: budget when small's answer is decoded here (0: task's)
    seed: int = 0  # seeds the choice of rolled-out positions
    chunk: int = FORCED_CHUNK  # positions per teacher-forcing forward pass (bounds logits memory)


class TokenLabels:
    """The dataset in memory: `columns` (name -> tensor, N rows) and `meta` (JSON-able dict)."""

    def __init__(self, columns: dict[str, torch.Tensor], meta: dict):
        self.columns, self.meta = columns, meta

    def __len__(self) -> int:
        return len(self.columns["label"]) if self.columns else 0

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.columns[name]

    @property
    def example_ids(self) -> list[str]:
        return list(self.meta.get("example_ids", []))

    @property
    def has_hidden(self) -> bool:
        return "hidden" in self.columns

    def save(self, path) -> None:
        """Atomic writes, the hidden states' sibling first: a crash leaves the old files, the new
        ones, or a newer sibling that does not match (so that it is restored on resume)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.has_hidden:
            check = {"rows": len(self), "done": len(self.meta.get("done", []))}
            _write(hidden_path(path), {"hidden": self.columns["hidden"]}, check)
        meta = {**self.meta, "schema": SCHEMA}
        _write(path, {k: v for k, v in self.columns.items() if k != "hidden"}, meta)

    @classmethod
    def load(cls, path) -> TokenLabels:
        from safetensors import safe_open

        path = Path(path)
        if not path.exists():
            raise UserError(f"label file {path} does not exist")
        with safe_open(str(path), framework="pt") as f:
            meta = {k: json.loads(v) for k, v in (f.metadata() or {}).items()}
            if meta.get("schema") != SCHEMA:
                raise UserError(f"{path} is not a token label file ({SCHEMA})")
            columns = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open API
        sibling = hidden_path(path)
        if "hidden" not in columns and sibling.exists():  # (older files hold it themselves)
            with safe_open(str(sibling), framework="pt") as f:
                check = {k: json.loads(v) for k, v in (f.metadata() or {}).items()}
                want = {"rows": len(columns["label"]), "done": len(meta.get("done", []))}
                if check == want:
                    columns["hidden"] = f.get_tensor("hidden")
        return cls(columns, meta)

    def rows_of(self, example_index: int) -> torch.Tensor:
        """Row indices of one example, in trajectory order."""
        idx = torch.nonzero(self.columns["example"] == example_index).flatten()
        return idx[torch.argsort(self.columns["position"][idx])]

    def summary(self) -> dict:
        """Counts per label source and the share of labelled rows that say 'small suffices'."""
        src, lab = self.columns["label_source"], self.columns["label"]
        known = lab >= 0
        return {
            "rows": len(self),
            "examples": len(self.meta.get("done", [])),
            **{name: int((src == i).sum()) for i, name in enumerate(LABEL_SOURCES)},
            "small_share": float(lab[known].float().mean()) if known.any() else float("nan"),
        }


def hidden_path(path) -> Path:
    """Where the hidden states of the label file `path` are kept."""
    path = Path(path)
    return path.with_name(f"{path.name.removesuffix('.safetensors')}.hidden.safetensors")


def _write(path: Path, columns: dict, meta: dict) -> None:
    from safetensors.torch import save_file

    tmp = path.with_name(path.name + ".tmp")
    meta = {k: json.dumps(v) for k, v in meta.items()}
    save_file({k: v.contiguous() for k, v in columns.items()}, str(tmp), metadata=meta)
    os.replace(tmp, path)


def small_hidden(engine, example, traj: list[int], chunk: int) -> torch.Tensor:
    """Small's hidden states along `traj` after `example`'s prompt: the `hidden` column of the
    example's rows, as `teacher_force` makes it."""
    prompt = engine.encode(example.messages)
    passes = forced_passes(engine.backends["small"], prompt, traj, chunk, hidden=True)
    return torch.cat([h.to(torch.bfloat16) for _, h in passes])


def reference_text(task, example) -> str | None:
    """The reference answer as the model should write it (`Task.reference_answer`: gsm8k's
    solution ending in \\boxed{N}, mbpp's gold code in a ```python block), or None."""
    return task.reference_answer(example)


def teacher_force(models, prompt, traj, top_k: int, chunk: int, roles=("small", "large")) -> dict:
    """Each model over prompt + traj: per trajectory position, small's hidden state and each
    model's greedy token and top-k, from the logits that predict traj[i]. Few batched passes."""
    out = {}
    for role in roles:
        hid, top_i, top_p, greedy = [], [], [], []
        for logits, h in forced_passes(models[role], prompt, traj, chunk, role == "small"):
            probs = torch.softmax(logits.float(), -1)
            tp, ti = torch.topk(probs, top_k, dim=-1)
            top_i.append(ti)
            top_p.append(tp)
            greedy.append(logits.argmax(-1))
            if h is not None:
                hid.append(h.to(torch.bfloat16))
        out[f"{role}_token"] = torch.cat(greedy)
        out[f"{role}_topk_ids"] = torch.cat(top_i)
        out[f"{role}_topk_probs"] = torch.cat(top_p)
        if hid:
            out["hidden"] = torch.cat(hid)
    return out


def rollout_budget(task, cfg: LabelConfig) -> int:
    return cfg.rollout_tokens or task.max_new_tokens


def run_rollouts(engine, task, rollouts: list[tuple], cfg: LabelConfig, desc: str) -> dict:
    """Label each rollout: 1 if continuing its prefix with its router (greedy, the core, batched
    `engine.batch` at a time) gives a correct answer, else 0.

    rollouts: (key, example, prefix token ids, prompt length, router) -> {key: label}."""
    from harness.core.loop import DecodeConfig, cut_at_stop
    from harness.core.scheduler import Job

    dc = DecodeConfig(
        max_new_tokens=rollout_budget(task, cfg), stop=tuple(task.stop), eos_ids=engine.eos_ids
    )
    by_key = {key: (ex, prefix, n_prompt) for key, ex, prefix, n_prompt, _ in rollouts}
    jobs = [Job(key, list(prefix), dc, router) for key, _, prefix, _, router in rollouts]
    out = {}
    for job, g in engine.generate_each(None, jobs, desc, unit="rollout", disable=len(jobs) < 2):
        ex, prefix, n_prompt = by_key[job.key]
        text = cut_at_stop(engine.decode(list(prefix[n_prompt:]) + list(g.token_ids)), task.stop)
        out[job.key] = int(float(task.score(ex, text)[task.metric]) >= 1.0)
    return out


def plan_example(engine, task, example, cfg: LabelConfig, index: int, traj=None, rollout=None):
    """(columns, prompt length, rollouts) for one example: every label the shortcut or agreement
    decides, -1 where a rollout will decide; `rollouts` as `run_rollouts` takes them, keyed
    (index, position)."""
    from routers.baselines import SmallOnly

    prompt = engine.encode(example.messages)
    if cfg.mode == "reference":
        ref = reference_text(task, example)
        if ref is None:
            raise UserError(f"{example.id} has no reference answer; use mode label_free")
        traj = engine.tokenizer.encode(ref, add_special_tokens=False) + [_im_end(engine)]
    elif traj is None:
        traj = _small_answer(engine, task, prompt, cfg.max_new_tokens or task.max_new_tokens)
    cols = teacher_force(engine.backends, prompt, list(traj), cfg.top_k, cfg.chunk)
    n = len(traj)
    ctx = torch.tensor(traj, dtype=torch.long)
    small_ok, large_ok = cols["small_token"] == ctx, cols["large_token"] == ctx
    label = torch.full((n,), -1, dtype=torch.int8)
    source = torch.full((n,), UNLABELLED, dtype=torch.int8)
    rollouts = []
    if cfg.mode == "label_free":
        agree = cols["small_token"] == cols["large_token"]
        label[:] = agree.to(torch.int8)
        source[:] = torch.where(agree, AGREE, DISAGREE).to(torch.int8)
    else:
        label[small_ok], source[small_ok] = 1, SMALL_MATCH
        only_large = large_ok & ~small_ok
        label[only_large], source[only_large] = 0, LARGE_MATCH
        for i in _rollout_positions(~small_ok & ~large_ok, cfg, example.id):
            prefix = prompt + list(traj[:i]) + [int(cols["small_token"][i])]
            rollouts.append(((index, i), example, prefix, len(prompt), rollout or SmallOnly()))
            source[i] = ROLLOUT
    cols.update(
        example=torch.full((n,), index, dtype=torch.int32),
        position=torch.arange(n, dtype=torch.int32),
        context_token=ctx,
        label=label,
        label_source=source,
    )
    return cols, len(prompt), rollouts


def label_example(engine, task, example, cfg: LabelConfig, index: int, traj=None, rollout=None):
    """Columns for one example (see the module docstring). `traj`: label_free trajectory; when
    None it is small's greedy answer decoded here. `rollout`: the router used for rollouts."""
    cols, n_prompt, rollouts = plan_example(engine, task, example, cfg, index, traj, rollout)
    for (_, i), label in run_rollouts(engine, task, rollouts, cfg, "rollouts").items():
        cols["label"][i] = label
    return cols, n_prompt


def _rollout_positions(both_miss: torch.Tensor, cfg: LabelConfig, example_id: str) -> list[int]:
    idx = torch.nonzero(both_miss).flatten()
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + _stable_hash(example_id))
    pick = idx[torch.randperm(len(idx), generator=g)[: cfg.max_rollouts]]
    return sorted(int(i) for i in pick)


def _stable_hash(text: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def _im_end(engine) -> int:
    """The chat end-of-turn token a chat answer ends with (Qwen <|im_end|>), else the EOS."""
    tid = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    return (
        tid if isinstance(tid, int) and tid != engine.tokenizer.unk_token_id else engine.eos_ids[-1]
    )


def _small_answer(engine, task, prompt, max_new_tokens) -> list[int]:
    from harness.core.loop import DecodeConfig
    from harness.core.scheduler import generate
    from routers.baselines import SmallOnly

    cfg = DecodeConfig(max_new_tokens=max_new_tokens, stop=tuple(task.stop), eos_ids=engine.eos_ids)
    g = generate(engine.backends, SmallOnly(), prompt, cfg)
    return list(g.token_ids) + ([engine.eos_ids[-1]] if g.stop_reason == "eos" else [])


def build_labels(
    engine,
    task,
    examples,
    cfg: LabelConfig,
    path,
    *,
    split: str = "train",
    split_seed: int = 0,
    trajectories: dict | None = None,
    rollout=None,
    round_: int = 1,
    progress: bool = True,
    group: int | None = None,
) -> TokenLabels:
    """Label `examples` into the file at `path`, saved after every group of examples (a
    checkpoint): a rerun with the same file skips the examples already done. `trajectories`: example id ->
    token ids (label_free mode; e.g. from small-only run records). Examples are labelled `group`
    at a time (default 4 x the engine's batch), their rollouts decoded together."""

    path = Path(path)
    data = TokenLabels.load(path) if path.exists() else None
    if data is not None and data.meta.get("config") != asdict(cfg):
        raise UserError(f"{path} was built with other settings; use another output path")
    ids = [ex.id for ex in examples]
    meta = {
        "mode": cfg.mode,
        "task": task.name,
        "split": split,
        "split_seed": split_seed,
        "example_ids": ids,
        "n_prompt": [0] * len(ids),
        "round": round_,
        "models": _model_sources(engine),
        "config": asdict(cfg),
        "done": [],
    }
    columns: dict[str, list] = {c: [] for c in COLUMNS}
    if data is not None:
        done = set(data.meta["done"])
        meta["done"] = [i for i in ids if i in done]
        by_id = {ex.id: ex for ex in examples}
        restore = None  # the hidden states' file did not survive (a fresh machine): make them
        if not data.has_hidden and meta["done"]:
            restore = _bar(len(meta["done"]), "hidden states (restored)", progress)
        for j, ex_id in enumerate(data.example_ids):
            if ex_id in done and ex_id in ids:
                rows = data.rows_of(j)
                for c in COLUMNS:
                    if c == "hidden" and not data.has_hidden:
                        traj = data["context_token"][rows].tolist()
                        columns[c].append(small_hidden(engine, by_id[ex_id], traj, cfg.chunk))
                        if restore is not None:
                            restore.update(1)
                        continue
                    col = data[c][rows]
                    columns[c].append(
                        col if c != "example" else torch.full_like(col, ids.index(ex_id))
                    )
                meta["n_prompt"][ids.index(ex_id)] = data.meta["n_prompt"][j]
        if restore is not None:
            restore.close()
    done = set(meta["done"])
    todo = [(i, ex) for i, ex in enumerate(examples) if ex.id not in done]
    if not todo and data is None:
        raise UserError("no examples to label")
    group = group or max(8, 4 * engine.batch)
    # a resumed file: the bar starts at what it holds
    bar = _bar(len(examples), f"labels {cfg.mode} r{round_}", progress, len(examples) - len(todo))
    for start in range(0, len(todo), group):
        planned, rollouts = [], []
        for i, ex in todo[start : start + group]:
            traj = None
            if trajectories is not None:
                if ex.id not in trajectories:
                    raise UserError(f"no trajectory for {ex.id} in the given records")
                traj = list(trajectories[ex.id])
            cols, n_prompt, todo_rollouts = plan_example(engine, task, ex, cfg, i, traj, rollout)
            planned.append((i, ex, cols, n_prompt))
            rollouts += todo_rollouts
        decided = run_rollouts(engine, task, rollouts, cfg, f"rollouts r{round_}")
        for i, ex, cols, n_prompt in planned:
            for (j, pos), label in decided.items():
                if j == i:
                    cols["label"][pos] = label
            for c in COLUMNS:
                columns[c].append(cols[c])
            meta["n_prompt"][i] = n_prompt
            meta["done"].append(ex.id)
        out = TokenLabels({c: torch.cat(v) for c, v in columns.items()}, meta)
        out.save(path)
        if bar is not None:
            bar.update(len(planned))
            bar.set_postfix(out.summary())
    if bar is not None:
        bar.close()
    return TokenLabels({c: torch.cat(v) for c, v in columns.items()}, meta)


def relabel_rollouts(
    engine, task, examples, data: TokenLabels, router, path, progress=True, group=None
):
    """CITER's second round: redo every rollout-labelled position with `router` (the trained
    router) continuing the answer instead of small alone. Returns a new dataset (round + 1),
    saved every `group` rollouts (meta "relabelled": how many of them are done), so a rerun
    with the same `path` resumes."""
    cfg = LabelConfig(**data.meta["config"])
    by_id = {ex.id: ex for ex in examples}
    rows = torch.nonzero(data["label_source"] == ROLLOUT).flatten().tolist()
    meta = {**data.meta, "round": data.meta["round"] + 1, "relabelled": 0}
    label = data["label"].clone()
    path = Path(path)
    if path.exists():
        prev = TokenLabels.load(path)
        same = prev.example_ids == data.example_ids and len(prev) == len(data)
        if not same or prev.meta.get("round") != meta["round"]:
            raise UserError(
                f"{path} was not relabelled from these round-{data.meta['round']} labels"
            )
        label, meta["relabelled"] = prev["label"].clone(), prev.meta.get("relabelled", len(rows))
    group = group or max(16, 8 * engine.batch)
    prompts = {}
    bar = _bar(len(rows), f"relabel r{meta['round']}", progress)
    if bar is not None:
        bar.update(meta["relabelled"])
    while meta["relabelled"] < len(rows):
        part = rows[meta["relabelled"] : meta["relabelled"] + group]
        rollouts = []
        for r in part:
            j = int(data["example"][r])
            ex = by_id[data.example_ids[j]]
            prompt = prompts.setdefault(ex.id, engine.encode(ex.messages))
            ex_rows = data.rows_of(j)
            pos = int(data["position"][r])
            prefix = (
                prompt
                + data["context_token"][ex_rows[:pos]].tolist()
                + [int(data["small_token"][r])]
            )
            rollouts.append((r, ex, prefix, len(prompt), router))
        for r, value in run_rollouts(engine, task, rollouts, cfg, "rollouts").items():
            label[r] = value
        meta["relabelled"] += len(part)
        TokenLabels({**data.columns, "label": label}, meta).save(path)
        if bar is not None:
            bar.update(len(part))
    if bar is not None:
        bar.close()
    out = TokenLabels({**data.columns, "label": label}, meta)
    if not rows:
        out.save(path)
    return out


def _model_sources(engine) -> dict:
    return {
        role: {"source": b.info.source, "dtype": b.info.dtype, "sha256": b.info.sha256}
        for role, b in engine.backends.items()
    }


def _bar(total: int, desc: str, progress: bool, initial: int = 0):
    """A tqdm bar over `total` items on stderr, `initial` of them done, or None without progress."""
    if not progress:
        return None
    import sys

    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr)
