"""A run as a value: `RunSpec`, what `hybridbench run` does, built once and handed on; `Summary`,
what a run gives back.

    spec = RunSpec(task="gsm8k", router="random", router_args={"p": 0.5}, limit=5,
                   out="runs/gsm8k-random", small="models/small", large="models/large")
    summary = harness.evaluation.runner.evaluate(spec)   # or hybridbench.evaluate(spec)
    spec.to_argv()      # ('run', '--task', 'gsm8k', '--router', 'random', ...): the same run

The command line is parsed at the edge (`harness/cli/run.py`) and turned into a spec by
`RunSpec.from_args`; below `harness/cli/` the run travels as this value. `to_argv` is the
command line that parses back to the same spec, so a run built in Python can be recorded and run
again from a shell (`hybridbench rerun` runs a sweep's recorded command lines).

The field names are the options' (`--small-device` is `small_device`), so that the engine's
loader (`harness.backends.engine.engine_from_args`) and `decode_config` read a spec as they read
the options.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from harness.errors import UserError

_THREADS = os.cpu_count()  # `--threads`' default: every CPU


@dataclass(frozen=True)
class RunSpec:
    """One `hybridbench run`: which task, router, decoding and models, into which folder."""

    task: str  # task name, import path or entry point (`hybridbench tasks`)
    router: str  # router name, import path or entry point (`hybridbench routers`)
    out: str  # the run folder (created, or resumed when it holds the same run)
    task_args: Mapping = field(default_factory=dict)  # the task's keyword arguments
    router_args: Mapping = field(default_factory=dict)  # the router's keyword arguments
    split: str = "test"  # train | calib | test | all
    split_seed: int = 0  # the hashed split's seed
    limit: int | None = None  # the split's first N examples (None: all)
    reuse_answers: str | None = None  # "SMALL_RUN,LARGE_RUN": answers taken from those runs
    # decoding
    max_new_tokens: int | None = None  # None: the task's own budget
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0
    # models and backends
    small: str | None = None  # packaged name, model folder, .gguf file (None: the default pair's)
    large: str | None = None  # the same, or the http(s) URL of an OpenAI-compatible server
    dtype: str = "bfloat16"  # every transformers model's dtype
    small_device: str = "auto"
    large_device: str = "auto"
    threads: int | None = _THREADS  # CPU threads (torch and llama.cpp)
    backend: str = "auto"  # auto | hf | llama.cpp, for every model
    small_backend: str | None = None  # small's own backend (None: `backend`)
    large_backend: str | None = None  # large's own backend (None: `backend`)
    n_ctx: int | None = None  # llama.cpp context length (None: 4096)
    batch: str = "auto"  # generations decoded together: "N" or "auto" (measured per machine)

    def __post_init__(self):
        for name in ("task_args", "router_args"):  # a copy: the caller's dict may change
            object.__setattr__(self, name, dict(getattr(self, name) or {}))
        object.__setattr__(self, "out", str(self.out))
        object.__setattr__(self, "batch", str(self.batch))
        if self.limit is not None and self.limit < 0:
            raise UserError(f"--limit must be >= 0, got {self.limit}")

    @classmethod
    def from_args(cls, args) -> RunSpec:
        """The spec of `hybridbench run`'s parsed options (an argparse namespace)."""
        from routers import parse_args

        known = {f.name for f in fields(cls)} - {"task_args", "router_args"}
        values = {k: v for k, v in vars(args).items() if k in known}
        return cls(
            **values,
            task_args=parse_args(getattr(args, "task_arg", [])),
            router_args=parse_args(getattr(args, "router_arg", [])),
        )

    def with_(self, **changes) -> RunSpec:
        """A copy with `changes` (e.g. another `out` or `limit`)."""
        return replace(self, **changes)

    def to_argv(self) -> tuple[str, ...]:
        """The `hybridbench run` command line of this spec (options left at their defaults
        are left out): `RunSpec.from_args` of its parse is this spec again."""
        argv = ["run", "--task", self.task]
        for k, v in self.task_args.items():
            argv += ["--task-arg", f"{k}={arg_text(v)}"]
        argv += ["--router", self.router]
        for k, v in self.router_args.items():
            argv += ["--router-arg", f"{k}={arg_text(v)}"]
        defaults = RunSpec(task="", router="", out="")
        for f in fields(self):
            if f.name in ("task", "router", "task_args", "router_args"):
                continue
            value = getattr(self, f.name)
            if value is not None and (f.name == "out" or value != getattr(defaults, f.name)):
                argv += [f"--{f.name.replace('_', '-')}", str(value)]
        return tuple(argv)


def arg_text(value) -> str:
    """A task's or router's argument as `routers.parse_args` reads it back to the same value."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


# The fields of the models and backends: the options every command that loads the pair shares.
MODEL_FIELDS = (
    "small",
    "large",
    "dtype",
    "small_device",
    "large_device",
    "threads",
    "backend",
    "small_backend",
    "large_backend",
    "n_ctx",
    "batch",
)
DECODE_FIELDS = ("max_new_tokens", "temperature", "top_p", "seed")


# The fields a one-line summary of a run shows.
HEADLINE = (
    "quality",
    "quality_ci_low",
    "quality_ci_high",
    "large_token_share",
    "large_call_share",
    "tok_per_s",
    "throughput_tok_per_s",
    "batch",
)


@dataclass(frozen=True)
class Summary:
    """What a run gives back: its folder and its summary (`harness.metrics.quality.summarize`,
    the summary the folder holds)."""

    folder: Path  # the run folder (read it with `harness.core.run_folder.RunFolder`)
    values: Mapping  # every aggregate of the run's summary; NaN where nothing defines one

    @property
    def n(self) -> int:
        """Examples scored."""
        return int(self.values.get("n") or 0)

    @property
    def n_failed(self) -> int:
        """Examples whose decoding or scoring failed (retried when the run resumes)."""
        return int(self.values.get("n_failed") or 0)

    @property
    def quality(self) -> float:
        """The task's primary metric, averaged over the scored examples (NaN: none)."""
        return _number(self.values.get("quality"))

    @property
    def large_token_share(self) -> float:
        """Tokens the large model emitted / all emitted tokens (NaN: none emitted)."""
        return _number(self.values.get("large_token_share"))

    def line(self) -> str:
        """The run's one summary line: `key=value` pairs; a value nothing defines yet (a share or
        a speed with nothing decoded) reads n/a."""
        keys = ("n", "n_failed", *HEADLINE)
        return "  ".join(f"{k}={value_text(self.values[k])}" for k in keys if k in self.values)


def _number(value) -> float:
    return math.nan if value is None else float(value)


def value_text(value) -> str:
    """A summary value as the summary line shows it: 4 significant digits, n/a for NaN."""
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.4g}"
    return "n/a" if value is None else str(value)
