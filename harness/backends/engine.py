"""The loaded models of one experiment, the tokenizer they share, and prompt encoding.

engine = Engine.load()                       # the default pair; llama.cpp on CPU when installed
ids = engine.encode([{"role": "user", "content": "2+2?"}])
gen = engine.generate(get_router("oracle"), ids, DecodeConfig(max_new_tokens=64))

Loading lives here, not in the CLI: `engine_from_args` turns the model options every command
shares (`harness.cli.main.add_model_args`) into an Engine; `load_backend` builds one role's backend.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from harness.backends import Backend, choose, sequences
from harness.core.loop import DecodeConfig
from harness.core.records import Generation
from harness.core.scheduler import generate, generate_many
from harness.errors import UserError

GENERATED = [0]  # tokens emitted by every Engine generation in this process (training cost logs)


class Engine:
    """Backends by role ("small", "large", optionally "reward") and their shared tokenizer."""

    def __init__(self, tokenizer, backends: dict[str, Backend], batch: int = 1):
        self.tokenizer = tokenizer
        self.backends = dict(backends)
        self.batch, self.batch_probe = batch, None  # generations decoded together (--batch)

    @classmethod
    def load(
        cls,
        small: str | None = None,
        large: str | None = None,
        *,
        dtype: str = "bfloat16",
        small_device: str = "auto",
        large_device: str = "auto",
        backend: str = "auto",
        small_backend: str | None = None,
        large_backend: str | None = None,
        threads: int = 1,
        n_ctx: int | None = None,
        n_seq: int = 1,
    ) -> Engine:
        """Load a small/large pair; refuses a pair whose tokenizers differ. `n_seq`: how many
        generations llama.cpp contexts hold at once (the batch size)."""
        from harness.backends import models

        roles = {
            "small": (small or models.DEFAULT_SMALL, small_backend or backend, small_device),
            "large": (large or models.DEFAULT_LARGE, large_backend or backend, large_device),
        }
        loaded = {
            role: load_backend(source, role, kind, device, dtype, threads, n_ctx, n_seq)
            for role, (source, kind, device) in roles.items()
        }
        models.check_same_tokenizer(loaded["small"][1], loaded["large"][1])
        return cls(loaded["small"][1], {role: b for role, (b, _) in loaded.items()})

    def add(self, role: str, backend: Backend) -> None:
        """Attach another model (a reward model, a remote large model) under `role`."""
        self.backends[role] = backend

    # Services for routers: a router's `backends(engine)` asks the engine for what it brings,
    # so routers never import a backend or a loader themselves.

    def reward_backend(self, checkpoint) -> Backend:
        """The reward model of `checkpoint` on the backend that suits small's
        (`harness.backends.reward_model.reward_backend_for`)."""
        from harness.backends.reward_model import reward_backend_for

        return reward_backend_for(checkpoint, self)

    def pass_costs(self) -> dict:
        """Measured seconds of small's and large's passes by tokens fed, on this machine
        (`harness.backends.pass_costs.pass_costs`; cached per machine)."""
        from harness.backends.pass_costs import pass_costs

        return pass_costs(self)

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """The tokenizer's EOS plus the chat end-of-turn token (Qwen: <|im_end|>)."""
        ids = {self.tokenizer.eos_token_id}
        ids |= {self.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
        return tuple(
            sorted(i for i in ids if isinstance(i, int) and i != self.tokenizer.unk_token_id)
        )

    def encode(self, prompt) -> list[int]:
        """A chat prompt (list of messages, or a plain user string) -> token ids, template applied."""
        messages = (
            [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        )
        out = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True
        )
        ids = out["input_ids"] if hasattr(out, "keys") else out
        return list(ids)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def generate(self, router, prompt_ids: list[int], cfg: DecodeConfig) -> Generation:
        cfg = replace(cfg, eos_ids=cfg.eos_ids or self.eos_ids)
        gen = generate(self.backends, router, prompt_ids, cfg, self.decode)
        GENERATED[0] += len(gen.token_ids)
        return gen

    def generate_many(self, router, jobs, batch: int | None = None):
        """`harness.core.scheduler.generate_many` over `batch` slots (default `self.batch`): yields
        (job, Generation | exception) as each finishes. Jobs are `Job(key, prompt_ids, cfg)`."""
        jobs = (replace(j, cfg=replace(j.cfg, eos_ids=j.cfg.eos_ids or self.eos_ids)) for j in jobs)
        for job, gen in generate_many(self.slots(batch or self.batch), router, jobs, self.decode):
            if not isinstance(gen, BaseException):
                GENERATED[0] += len(gen.token_ids)
            yield job, gen

    def generate_each(
        self, router, jobs, desc: str, unit: str = "ex", disable: bool = False, total=None
    ):
        """(job, Generation) for every job, `self.batch` at a time, as each finishes, with a
        progress bar on stderr; a failed generation stops the caller (its error is raised).
        With `total` (the number of jobs), `jobs` is read lazily, one job as a slot frees."""
        import sys

        from tqdm import tqdm

        if total is None:
            jobs = list(jobs)
            total = len(jobs)
        with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=disable) as bar:
            for job, gen in self.generate_many(router, jobs):
                if isinstance(gen, BaseException):
                    raise gen
                bar.update()
                yield job, gen

    def slots(self, n: int) -> list[dict[str, Backend]]:
        """n role -> backend maps over the same models, one per generation in flight."""
        per_role = {role: sequences(b, n) for role, b in self.backends.items()}
        return [{role: seqs[i] for role, seqs in per_role.items()} for i in range(n)]

    def model_infos(self) -> dict:
        """Role -> ModelInfo as a dict, for run manifests and the cost model."""
        return {role: asdict(b.info) for role, b in self.backends.items()}


def backend_kind(source: str, requested: str, device: str, role: str) -> str:
    """Which backend `requested` (auto, hf, llama.cpp) resolves to for `source` in `role`,
    without loading anything: runs record it in their identity before loading a model."""
    from harness.backends import models

    return choose(requested, models.is_gguf(source), models.pick_device(device, role))


def load_backend(
    source: str,
    role: str,
    backend: str = "auto",
    device: str = "auto",
    dtype: str = "bfloat16",
    threads: int = 1,
    n_ctx: int | None = None,
    n_seq: int = 1,
):
    """(Backend, tokenizer) for one model. `dtype` applies to transformers only: a llama.cpp
    model computes in the quantized types its GGUF file holds, in a context of `n_seq` sequences,
    with every layer on the GPU when the role's device is one (`llamacpp.gpu_layers`).
    `n_ctx`: tokens a sequence holds (transformers: before its preallocated cache grows)."""
    from harness.backends import models

    kind = backend_kind(source, backend, device, role)
    if kind == "hf":
        from harness.backends.hf import HFBackend

        m = models.load_model(source, role=role, device=device, dtype=dtype)
        return HFBackend(m.model, m.info, n_ctx=n_ctx), m.tokenizer
    from harness.backends import llamacpp

    where = models.pick_device(device, role)
    path, sha = models.gguf_file(source)
    info = llamacpp.gguf_info(path, role, source, sha, device=where)
    backend = llamacpp.LlamaCppBackend(
        path, info, threads=threads, n_ctx=n_ctx, n_seq=n_seq, device=where
    )
    return backend, models.gguf_tokenizer(path, sha)


def engine_from_args(spec, router=None) -> Engine:
    """Set threads, then load the pair `spec` names, plus the models `router` brings. `spec`:
    a `harness.backends.model_spec.ModelSpec`, or a value carrying its fields by name (a
    `harness.evaluation.spec.RunSpec`).

    A `--large` that is an http(s) URL is an OpenAI-compatible completions server (llama.cpp's
    llama-server, vLLM) serving the large model; it must use small's tokenizer, which cannot be
    checked from here. Commands with `--batch` get `engine.batch` (and `engine.batch_probe` for
    auto, `harness.backends.batch_size`); others decode one generation at a time.
    """
    import torch

    from harness.backends import batch_size as batching

    threads = max(1, spec.threads or 1)
    torch.set_num_threads(threads)
    batch = batching.parse(str(getattr(spec, "batch", 1)))
    kw = {
        "dtype": spec.dtype,
        "threads": threads,
        "n_ctx": getattr(spec, "n_ctx", None),
        "n_seq": max(batching.CANDIDATES) if batch == "auto" else batch,
    }
    small_kind = spec.small_backend or spec.backend
    if _is_url(spec.large):
        if spec.large_backend:
            raise UserError("--large-backend does not apply to a remote large model")
        engine = remote_engine(spec.large, spec.small, backend=small_kind, **kw)
    else:
        engine = Engine.load(
            spec.small,
            spec.large,
            small_device=spec.small_device,
            large_device=spec.large_device,
            backend=spec.backend,
            small_backend=spec.small_backend,
            large_backend=spec.large_backend,
            **kw,
        )
    for role, backend in (router.backends(engine) if router else {}).items():
        engine.add(role, backend)  # models a router brings, e.g. the reward router's
    engine.batch, engine.batch_probe = batch, None
    if batch == "auto" and _transformers_on_cpu(engine):
        # transformers batches too (`HFBackend.forward_batch`), but in bf16 a batch can move a
        # greedy near-tie (docs/speed.md): on the CPU, where batching it was never the default,
        # auto keeps one generation at a time, so such runs' records stay what they were
        engine.batch = 1
    elif batch == "auto":
        shape = router.batch_shape() if router is not None else None
        engine.batch, engine.batch_probe = batching.auto(engine, threads, shape)
    return engine


def _transformers_on_cpu(engine: Engine) -> bool:
    """Every model of the engine is a transformers model on the CPU."""
    from harness.backends.hf import HFSequence

    return all(
        isinstance(b, HFSequence) and b.owner.device.type == "cpu" for b in engine.backends.values()
    )


def remote_engine(
    url: str,
    small: str | None = None,
    *,
    dtype: str = "bfloat16",
    backend: str = "auto",
    threads: int = 1,
    n_ctx: int | None = None,
    n_seq: int = 1,
    **cfg,
):
    """An Engine whose small model is local (on `backend`) and whose large model is the server
    at `url`."""
    from harness.backends import models
    from harness.backends.remote import RemoteBackend, RemoteConfig, remote_info

    source = small or models.DEFAULT_SMALL
    s, tokenizer = load_backend(source, "small", backend, "auto", dtype, threads, n_ctx, n_seq)
    remote = RemoteBackend(RemoteConfig(url, **cfg), vocab_size=s.n_vocab)
    remote.info = remote_info(remote)
    return Engine(tokenizer, {"small": s, "large": remote})


def decode_config(spec, **extra):
    """DecodeConfig from the decoding fields of `spec` (a `RunSpec`, or the command line's
    options of those names), with user-facing checks."""
    if spec.max_new_tokens is not None and spec.max_new_tokens < 0:
        raise UserError(f"--max-new-tokens must be >= 0, got {spec.max_new_tokens}")
    if spec.temperature < 0:
        raise UserError(f"--temperature must be >= 0, got {spec.temperature}")
    if not 0 < spec.top_p <= 1:
        raise UserError(f"--top-p must be in (0, 1], got {spec.top_p}")
    kw = {"temperature": spec.temperature, "top_p": spec.top_p, "seed": spec.seed, **extra}
    if spec.max_new_tokens is not None:
        kw["max_new_tokens"] = spec.max_new_tokens
    return DecodeConfig(**kw)


def _is_url(source: str | None) -> bool:
    """A `--large` that names an OpenAI-compatible server rather than a model."""
    return (source or "").startswith(("http://", "https://"))


def backend_kinds(spec) -> dict[str, str]:
    """Role -> resolved backend for the pair `spec` names (a `ModelSpec` or a `RunSpec`; for a
    run's identity)."""
    from harness.backends import models

    if _is_url(spec.large):
        large = "remote"
    else:
        large = backend_kind(
            spec.large or models.DEFAULT_LARGE,
            spec.large_backend or spec.backend,
            spec.large_device,
            "large",
        )
    small_source, small_kind = (
        spec.small or models.DEFAULT_SMALL,
        spec.small_backend or spec.backend,
    )
    return {
        "small": backend_kind(small_source, small_kind, spec.small_device, "small"),
        "large": large,
    }
