"""The reward model of the reward-token router (seed paper, sections 2.1-2.2): its network, its
checkpoints and the backends that run it under the core's role "reward".

  RewardModel     a transformer backbone sharing the pair's tokenizer, its unembedding removed,
                  plus a head: one scalar per token position (section 2.1); the head is the
                  paper's bias-free linear layer, or a small MLP (`head="mlp"`, see HEADS)
  RewardBackend   the `harness.core.backend.Backend` the core calls under role "reward": it feeds
                  the drafted tokens into the reward model's own KV cache (never re-reading the
                  prefix) and returns [n_rows, 1] scores; its forwards are recorded and costed
                  like any model's (ForwardRecord model "reward", phase "score")
  reward_backend_for   the backend that suits an engine's small model

The policy that reads the scores is `routers.reward.RewardRouter`; checkpoints are written by
`hybridbench train-reward` (`harness.training.reward`).

The default backbone is the first 6 of the small model's 24 layers (Qwen2.5-Coder-0.5B), which
costs about a quarter of small's per-token compute and no vocabulary projection. A head-only
checkpoint on ALL of small's layers (`train-reward --layers 24`) needs no model of its own: its
feature is small's last hidden state after reading the token, which small computes anyway when
the token is kept (`SmallHead`), so it costs one small pass per deferred token and nothing per
kept one.
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness.backends.hf import HFBackend, cache_kwarg, returned_cache
from harness.core.records import ModelInfo
from harness.errors import UserError
from harness.files import REWARD_FORMAT, file_sha256
from harness.files import read_reward_checkpoint as read_checkpoint

FORMAT = REWARD_FORMAT  # checkpoint format tag
DEFAULT_LAYERS = 6  # backbone depth: the first 6 of small's 24 layers


HEADS = ("linear", "mlp")  # reward heads: the paper's linear layer; H -> MLP_WIDTH -> GELU -> 1
MLP_WIDTH = 256


def make_head(size: int, kind: str = "linear") -> torch.nn.Module:
    """An untrained head [N, H] -> [N, 1] in float32; the linear one scores every token 0."""
    if kind == "linear":
        head = torch.nn.Linear(size, 1, bias=False)
        torch.nn.init.zeros_(head.weight)
        return head
    if kind == "mlp":
        return torch.nn.Sequential(
            torch.nn.Linear(size, MLP_WIDTH), torch.nn.GELU(), torch.nn.Linear(MLP_WIDTH, 1)
        )
    raise UserError(f"reward head must be one of {', '.join(HEADS)}, got {kind!r}")


def head_from_checkpoint(ck: dict, size: int) -> torch.nn.Module:
    """The trained head of a checkpoint (older ones hold only a linear head's weight, "head")."""
    kind = ck.get("head_kind", "linear")
    head = make_head(size, kind)
    with torch.no_grad():
        if "head_state" in ck:
            head.load_state_dict(ck["head_state"])
        else:
            head.weight.copy_(ck["head"].reshape(1, -1))
    return head.eval()


class RewardModel(torch.nn.Module):
    """Backbone (a base transformer: no unembedding) + head -> one score per token.

    `forward(ids [B, T], past)` returns (scores [B, T] float32, hidden [B, T, H], past).
    The score at position t reads only tokens <= t (causal attention), so scoring a sequence
    incrementally through a KV cache gives the same numbers as one full pass.
    """

    def __init__(self, backbone: torch.nn.Module, head: str = "linear"):
        super().__init__()
        self.backbone = backbone
        device = next(backbone.parameters()).device
        size = backbone.config.get_text_config().hidden_size
        self.head_kind = head
        self.head = make_head(size, head).to(device)
        self.cache_kwarg = cache_kwarg(backbone)

    def forward(self, input_ids: torch.Tensor, past_key_values=None):
        out = self.backbone(
            input_ids=input_ids,
            use_cache=past_key_values is not None,
            **{self.cache_kwarg: past_key_values},
        )
        h = out.last_hidden_state
        return self.head(h.float()).squeeze(-1), h, returned_cache(out)

    @property
    def config(self):
        return self.backbone.config


class RewardBackend(HFBackend):
    """The reward model behind the core's Backend protocol; outputs are [n_rows, 1] scores."""

    @torch.inference_mode()
    def forward(self, ids: list[int], n_rows: int, hidden: bool = False):
        if self.cache is None:
            self.reset()
        x = torch.tensor([ids], device=self.device)
        scores, h, self.cache = self.model(x, self.cache)
        self.length += len(ids)
        out = scores[0, -n_rows:, None].float().cpu()
        return out, (h[0, -n_rows:].float().cpu() if hidden else None)


# --- building and loading --------------------------------------------------------------------


def load_backbone(source: str, n_layers: int, dtype: str = "bfloat16", device: str = "cpu"):
    """The first `n_layers` transformer layers of `source` (packaged name, folder or .gguf) as a
    base model: embeddings, those layers and the final norm; the unembedding is never loaded."""
    import transformers
    from transformers import AutoConfig, AutoModel

    from harness.backends import models

    where, _ = models.resolve_source(source, dtype)
    config = AutoConfig.from_pretrained(where)
    text = config.get_text_config()
    if not 1 <= n_layers <= text.num_hidden_layers:
        raise UserError(
            f"reward backbone: layers must be in 1..{text.num_hidden_layers}, got {n_layers}"
        )
    text.num_hidden_layers = n_layers
    if getattr(text, "layer_types", None):
        text.layer_types = text.layer_types[:n_layers]
    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the skipped layers and lm_head are expected
    try:
        model = AutoModel.from_pretrained(
            where, config=config, dtype=models._check_dtype(dtype), device_map=device
        )
    finally:
        transformers.logging.set_verbosity(level)
    return model.eval()


def build_reward_model(
    source: str,
    n_layers: int = DEFAULT_LAYERS,
    dtype: str = "bfloat16",
    device: str = "cpu",
    head: str = "linear",
) -> RewardModel:
    """An untrained reward model on the first `n_layers` layers of `source`."""
    return RewardModel(load_backbone(source, n_layers, dtype, device), head).eval()


def save_checkpoint(path: str | Path, model: RewardModel, source: str, **extra) -> None:
    """Write what rebuilds `model`: backbone source and depth, the head, and the backbone
    parameters that differ from the source's (`trained`, empty when only the head was trained).
    `extra` holds training facts (used_example_ids, metrics, args). Written atomically."""
    path = Path(path)
    trained = extra.pop("trained", {})
    ck = {
        "format": FORMAT,
        "backbone": source,
        "n_layers": model.config.get_text_config().num_hidden_layers,
        "head_kind": model.head_kind,
        "head_state": {
            k: v.detach().float().cpu().clone() for k, v in model.head.state_dict().items()
        },
        "trained": {k: v.detach().cpu().clone() for k, v in trained.items()},
        **extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(ck, tmp)
    tmp.replace(path)


def load_reward_model(path: str | Path, dtype: str = "bfloat16", device: str = "cpu"):
    """(RewardModel, checkpoint dict) from a checkpoint written by `save_checkpoint`."""
    ck = read_checkpoint(path)
    kind = ck.get("head_kind", "linear")
    model = build_reward_model(ck["backbone"], ck["n_layers"], dtype, device, head=kind)
    size = model.config.get_text_config().hidden_size
    model.head.load_state_dict(head_from_checkpoint(ck, size).state_dict())
    with torch.no_grad():
        if ck["trained"]:
            params = dict(model.backbone.named_parameters())
            for name, value in ck["trained"].items():
                params[name].copy_(value)
    return model.eval(), ck


def model_info(model: RewardModel, source: str, dtype: str, sha256: str = "") -> ModelInfo:
    """Cost facts of a reward model, counted like `harness.backends.models.load_model` counts small's."""
    from harness.backends import models

    size = getattr(torch, dtype).itemsize
    return ModelInfo(
        name="reward",
        source=source,
        device=str(next(model.parameters()).device),
        dtype=dtype,
        n_params=sum(p.numel() for p in model.parameters()),
        weight_bytes=models.weight_bytes(model),
        kv_bytes_per_token=models.kv_bytes_per_token(model.config, size),
        sha256=sha256,
    )


def load_reward_backend(
    path: str | Path, dtype: str = "bfloat16", device: str = "cpu", tokenizer=None
) -> RewardBackend:
    """The "reward" backend for the core; refuses a backbone whose tokenizer differs from
    `tokenizer` (the pair's): the reward model must read the very token ids small proposes."""
    from harness.backends import models

    model, ck = load_reward_model(path, dtype, device)
    if tokenizer is not None:
        theirs = models.load_tokenizer(ck["backbone"])
        models.check_same_tokenizer(tokenizer, theirs, ("pair", "reward backbone"))
    return RewardBackend(model, model_info(model, str(path), dtype, file_sha256(path)))


class _HeadOverHidden:
    """A reward head over the hidden states of another backend (`inner`), whose cache it reads:
    its length, reset, crop and sync are the inner backend's."""

    inner: object
    head: torch.nn.Module

    @property
    def length(self) -> int:
        return self.inner.length

    def reset(self) -> None:
        self.inner.reset()

    def crop(self, n: int) -> None:
        self.inner.crop(n)

    def sync(self) -> None:
        self.inner.sync()

    @torch.inference_mode()
    def score(self, h: torch.Tensor) -> torch.Tensor:
        """[n, H] hidden states -> [n] scores."""
        return self.head(h.float()).reshape(-1)


class LlamaCppRewardBackend(_HeadOverHidden):
    """The reward model on llama.cpp: its backbone's layers as a truncated GGUF
    (`harness.backends.models.truncated_gguf`; llama.cpp returns their normed hidden states, and stops
    computing there: `LlamaCppBackend(embeddings_only=True)`) and the checkpoint's head applied
    here. Only for head-only checkpoints (a trained backbone's weights
    are not in the GGUF). Scores match the transformers reward model up to llama.cpp's quantized
    numerics (docs/trained-routers.md, the reward model's backbone on llama.cpp). Batches like any llama.cpp model."""

    def __init__(self, inner, head: torch.nn.Module, info: ModelInfo, owner=None):
        self.inner, self.head, self.info = inner, head, info
        self.owner = owner or self

    def forward(self, ids: list[int], n_rows: int, hidden: bool = False):
        return self.owner.forward_batch([(self, ids, n_rows, hidden)])[0]

    def forward_batch(self, calls) -> list:
        inner = [(c[0].inner, c[1], c[2], True) for c in calls]
        outs = self.inner.owner.forward_batch(inner)
        return [
            (self.score(h)[:, None], h if c[3] else None)
            for c, (_, h) in zip(calls, outs, strict=True)
        ]

    def sequences(self, n: int) -> list:
        seqs = self.inner.sequences(n)
        return [self] + [LlamaCppRewardBackend(s, self.head, self.info, self) for s in seqs[1:]]


class SmallHead(_HeadOverHidden):
    """The reward model when its backbone is the pair's small model, whole and untrained (a
    head-only checkpoint with `--layers` = all of small's): the score of a drafted token is the
    head over small's own last hidden state after reading it. The core takes that state from
    small's pass over the draft (`harness.core.loop.score`, told by `reads_small`), a pass small makes
    anyway when the token is kept (its next draft reuses it), so no second model runs: the
    router's cost is one wasted small pass per deferred token. Its cache is small's (`inner`:
    reset and crop act on it); `forward` (calibration) scores tokens with small's pass."""

    reads_small = True

    def __init__(self, head: torch.nn.Module, info: ModelInfo, small):
        self.head, self.info, self.inner = head, info, small

    def forward(self, ids: list[int], n_rows: int, hidden: bool = False):
        """[n_rows, 1] scores of the last n_rows of `ids`, through small's cache."""
        _, h = self.inner.forward(ids, n_rows, True)
        return self.score(h)[:, None], (h if hidden else None)

    def sequences(self, n: int) -> list:
        from harness.backends import sequences

        return [SmallHead(self.head, self.info, s) for s in sequences(self.inner, n)]


def small_dims(backend) -> tuple[int, int]:
    """(transformer layers, hidden size) of small's backend (llama.cpp or transformers)."""
    owner = getattr(backend, "owner", backend)
    if hasattr(owner, "lib") and getattr(owner, "model", None):
        return int(owner.lib.llama_model_n_layer(owner.model)), int(owner.n_embd)
    text = backend.model.config.get_text_config()
    return int(text.num_hidden_layers), int(text.hidden_size)


def small_head(path, ck: dict, engine) -> SmallHead | None:
    """The `SmallHead` of checkpoint `ck` when its backbone is all of `engine`'s small model,
    untrained; else None."""
    small = engine.backends["small"]
    if ck["trained"] or ck["backbone"] != small.info.source:
        return None
    n_layers, size = small_dims(small)
    if ck["n_layers"] != n_layers:
        return None
    head = head_from_checkpoint(ck, size)
    n = sum(p.numel() for p in head.parameters())
    info = ModelInfo(
        name="reward",
        source=str(path),
        device="cpu",
        dtype="float32",
        n_params=n,
        weight_bytes=4 * n,
        kv_bytes_per_token=0,
        sha256=file_sha256(path),
        backend="small's own pass",
    )
    return SmallHead(head, info, small)


def _llamacpp_refusal(path, ck: dict) -> str:
    """Why checkpoint `ck` cannot run on llama.cpp ("" when it can)."""
    from harness.backends import models

    if ck["trained"]:
        return f"{path} trained backbone layers; its reward model runs on transformers only"
    if not models.is_gguf(ck["backbone"]):
        return f"{path}: backbone {ck['backbone']} is not a GGUF llama.cpp can run"
    return ""


def load_llamacpp_reward_backend(
    path: str | Path, threads: int = 1, n_ctx=None, n_seq: int = 1, ck: dict | None = None
):
    """The reward model of checkpoint `path` (its dict `ck`, read here if not given) on llama.cpp
    (see `LlamaCppRewardBackend`); a UserError for a checkpoint whose backbone was trained or is
    not a GGUF."""
    from dataclasses import replace

    from harness.backends import models
    from harness.backends.llamacpp import LlamaCppBackend, gguf_info

    ck = ck or read_checkpoint(path)
    refusal = _llamacpp_refusal(path, ck)
    if refusal:
        raise UserError(refusal)
    gguf = models.truncated_gguf(ck["backbone"], ck["n_layers"])
    info = gguf_info(gguf, "reward", str(path), file_sha256(path), embeddings_only=True)
    inner = LlamaCppBackend(
        gguf, info, threads=threads, n_ctx=n_ctx, n_seq=n_seq, embeddings_only=True
    )
    head = head_from_checkpoint(ck, inner.n_embd)
    return LlamaCppRewardBackend(inner, head, replace(info, source=str(path)))


def reward_backend_for(path: str | Path, engine):
    """The reward backend that suits `engine`'s small model: small's own pass (`SmallHead`) when
    the backbone is all of small, untrained; llama.cpp beside a llama.cpp small model when the
    checkpoint allows it (head only, GGUF backbone); else transformers on small's device in
    small's dtype (bfloat16 beside a llama.cpp small model)."""
    from harness.backends import models

    small = engine.backends["small"]
    ck = read_checkpoint(path)
    shared = small_head(path, ck, engine)
    if shared is not None:
        return shared
    if small.info.backend.startswith("llama.cpp"):
        if not _llamacpp_refusal(path, ck):
            gguf, sha = models.gguf_file(ck["backbone"])
            theirs = models.gguf_tokenizer(gguf, sha)
            models.check_same_tokenizer(engine.tokenizer, theirs, ("pair", "reward backbone"))
            n_seq = getattr(getattr(small, "owner", small), "n_seq", 1)
            return load_llamacpp_reward_backend(path, small.threads, small.n_ctx, n_seq, ck)
    dtype = small.info.dtype if small.info.dtype in models.DTYPES else "bfloat16"
    return load_reward_backend(path, dtype, small.info.device, engine.tokenizer)
