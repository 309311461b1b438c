"""The llama.cpp backend: a GGUF model decoded in process through llama-cpp-python's C API.

llama.cpp reads the quantized weights directly (~0.5 GB per token for the packaged 0.5B model
instead of ~1.2 GB of dequantized bf16), which is why it decodes 4-6x faster than transformers on
a CPU. The low-level `llama_cpp` module is used, not the high-level `Llama` class: that class
re-evaluates prompts itself and keeps an n_ctx x vocab float32 score buffer (2.3 GiB at 4096
tokens for a 151,936-token vocabulary) that the core never reads.

One `LlamaCppBackend` = one model + one context + its KV cache (sequence 0; `n_seq` > 1 gives
the context more sequences, `sequences()`, batched together by `forward_batch`):

    forward(ids, n_rows, hidden)  one `llama_decode` per `n_batch` chunk of new tokens, appended
                                  to the cache; logits requested only for the last n_rows
                                  positions. With `hidden`, the context also outputs embeddings
                                  (pooling NONE): the final hidden state after the output norm,
                                  which is what transformers' `hidden_states[-1]` holds. llama.cpp
                                  then outputs every position of the pass (a cost only for a
                                  query router's prefill, which reads every row anyway).
    crop(n)                       `llama_memory_seq_rm(mem, seq, n, -1)`: forget positions >= n
    reset()                       the same from 0

`info.weight_bytes` is what one decode step really reads: the GGUF's tensor bytes in their
quantized types, less the token-embedding table (a step gathers one row of it). The KV cache is
llama.cpp's default f16, so `kv_bytes_per_token` = 2 (K, V) * layers * kv_heads * head_dim * 2.

Numerics: llama.cpp stores the KV cache in f16 (its default) and quantizes activations for its
quantized matrix products (q8 blocks), and its results for a position depend on how the positions
were batched; greedy decoding on it is deterministic for one batching, and agrees with
transformers on the same file only up to near-ties (F32 files agree to float rounding:
tests/test_llamacpp.py). Batching sequences together is such a change: on the packaged pair a
row's logits move by up to 0.25-0.64 (max |difference| over the vocabulary) when its call shares a
`llama_decode` with other sequences, with the repacked kernels and flash attention on or off,
while a sequence alone in a many-sequence context is bit-identical to a one-sequence context
(benchmarks/batch_numerics.py). So a batched greedy run equals the unbatched one up to tokens whose
top-2 margin is below that, and which tokens those are depends on which generations shared a call.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from harness.core.records import ModelInfo
from harness.core.stats import ARGMAX, FULL, TokenStats
from harness.errors import UserError

ALL_LAYERS = -1  # n_gpu_layers that offloads every layer ("a negative value means all layers")
CUDA_BUILD = (  # the one line that builds llama-cpp-python with CUDA (docs/speed.md)
    'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir '
    "llama-cpp-python==0.3.36"
)
GGUF_HINT = "copy it again, or convert the model with llama.cpp's convert_hf_to_gguf.py"
DEFAULT_N_CTX = 4096  # prompt + completion tokens one generation may hold
DEFAULT_N_BATCH = 512  # tokens per llama_decode call (longer feeds are split)
CACHE_GGUF_INFO_FROM = 64 << 20  # bytes: GGUF files at least this big have their sizes cached


@functools.cache
def _lib():
    """The `llama_cpp` module, initialised once, with llama.cpp's own logging cut to errors."""
    try:
        import llama_cpp
        from llama_cpp import _logger
    except ImportError:
        raise UserError(
            "backend llama.cpp needs llama-cpp-python: pip install 'hybridbench[llamacpp]'"
        ) from None
    _logger.set_verbose(False)
    llama_cpp.llama_backend_init()
    return llama_cpp


def library_version() -> str:
    return getattr(_lib(), "__version__", "?")


def gpu_layers(device: str) -> int:
    """The layers llama.cpp offloads for a model placed on `device`: none on the CPU, every one
    on a GPU ("cuda", "cuda:1", "gpu"). A GPU needs a llama-cpp-python built with GPU offload
    (`llama_supports_gpu_offload`); the error says how to build one."""
    kind = device.split(":")[0]
    if kind == "cpu":
        return 0
    if kind not in ("cuda", "gpu"):
        raise UserError(f"backend llama.cpp runs on the CPU or a CUDA GPU, not on {device!r}")
    if not _lib().llama_supports_gpu_offload():
        raise UserError(
            f"the installed llama-cpp-python has no GPU offload, so it cannot put a model on "
            f"{device}; build it with CUDA: {CUDA_BUILD}"
        )
    return ALL_LAYERS


def _gpu_index(device: str) -> int | None:
    """The GPU a "cuda:N" device names (None: llama.cpp's default placement)."""
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else None


def gguf_info(
    path: Path,
    role: str,
    source: str,
    sha256: str = "",
    embeddings_only: bool = False,
    device: str = "cpu",
) -> ModelInfo:
    """Sizes of a GGUF file from its header: what the cost model and the manifest need.
    `embeddings_only`: the vocabulary projection is never computed (`LlamaCppBackend`), so its
    weights are not counted as read. Reading the header means parsing every field (the
    tokenizer's 150k strings: ~15 s a file on this project's CPU), so the sizes of a real model's
    file are cached per path, size and modification time (cache_dir()/gguf-info/)."""
    sizes = _gguf_sizes(Path(path), embeddings_only)
    return ModelInfo(
        name=role,
        source=source,
        device=device,
        sha256=sha256,
        backend=f"llama.cpp {library_version()}",
        **sizes,
    )


def _gguf_sizes(path: Path, embeddings_only: bool) -> dict:
    import hashlib
    import json

    from harness.backends.models import cache_dir

    try:
        st = path.stat()
    except OSError as e:
        raise UserError(f"not a readable GGUF file: {path} ({e})") from None
    if st.st_size < CACHE_GGUF_INFO_FROM:  # a small file's header reads fast: nothing to keep
        return _read_gguf_sizes(path, embeddings_only)
    key = json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns, embeddings_only])
    cached = cache_dir() / "gguf-info" / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".json")
    if cached.is_file():
        return json.loads(cached.read_text())
    sizes = _read_gguf_sizes(path, embeddings_only)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(sizes))
    tmp.replace(cached)  # atomic: a concurrent reader sees the whole file or none
    return sizes


def _read_gguf_sizes(path: Path, embeddings_only: bool) -> dict:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - a damaged file fails in many ways (numpy, struct)
        raise UserError(f"not a readable GGUF file: {path} ({e}); {GGUF_HINT}") from None

    def field(key: str, default=None):
        f = reader.fields.get(key)
        return f.contents() if f is not None else default

    arch = field("general.architecture", "")
    layers = int(field(f"{arch}.block_count", 0))
    heads = int(field(f"{arch}.attention.head_count", 1))
    kv_heads = int(field(f"{arch}.attention.head_count_kv", heads))
    head_dim = int(field(f"{arch}.attention.key_length", 0)) or int(
        field(f"{arch}.embedding_length", 0)
    ) // max(heads, 1)
    skip = {"token_embd.weight"} | ({"output.weight"} if embeddings_only else set())
    read = [t for t in reader.tensors if t.name not in skip]
    return {
        "dtype": "gguf:" + quantization(reader),
        "n_params": sum(int(t.n_elements) for t in reader.tensors),
        "weight_bytes": sum(int(t.n_bytes) for t in read),
        "kv_bytes_per_token": 2 * layers * kv_heads * head_dim * 2,
    }


def quantization(reader) -> str:
    """Tensor types by count, most common first: 'Q5_0 x133, F32 x121, ...'."""
    counts = Counter(t.tensor_type.name for t in reader.tensors)
    return ", ".join(f"{name} x{n}" for name, n in counts.most_common())


class _GgmlTensor(ctypes.Structure):
    """The head of `struct ggml_tensor` up to its name, as ggml.h of llama-cpp-python 0.3.36
    declares it (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10, GGML_MAX_NAME 64): only
    `name`'s offset is used, to recognise a graph node in the scheduler's eval callback."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
    ]


NAME_OFFSET = _GgmlTensor.name.offset
# llama.cpp's names for the final norm's output (t_embd): "result_norm", renamed
# "result_embd_pooled" when the context outputs embeddings (pooling none: the same tensor)
EMBEDDING_NODES = (b"result_norm\0", b"result_embd_pooled\0")


def row_stats(x: np.ndarray, level: str, scratch: np.ndarray | None = None) -> tuple:
    """(argmax, top-1 probability, entropy, top-2 margin) of one row of logits, or (argmax,) at
    level "argmax": a few passes of numpy over the row where it lies, one thread, no copy of it
    (torch's argmax over a 151,936-wide row is several times slower here, and its thread pool
    would compete with llama.cpp's threads). With z = exp(x - max) and s = sum(z): the top-1
    probability is 1 / s and the entropy log(s) - sum(z * (x - max)) / s, which equals
    `harness.core.stats.summarize` up to float rounding (tests/test_llamacpp.py). `scratch`:
    [2, V] float32 to work in (none allocated per row)."""
    i = int(x.argmax())
    if level == ARGMAX:
        return (i,)
    d, z = scratch if scratch is not None else np.empty((2, len(x)), dtype=np.float32)
    np.subtract(x, x[i], out=d)  # <= 0, and 0 at i
    np.exp(d, out=z)
    s = float(z.sum())
    d[i] = -np.inf
    second = math.exp(float(d.max())) / s if len(d) > 1 else 0.0
    d[i] = 0.0
    entropy = math.log(s) - float(np.multiply(z, d, out=z).sum()) / s  # no BLAS: no threads
    return (i, 1.0 / s, entropy, 1.0 / s - second)


def _stacked(rows: list):
    """One call's outputs: logits [n, V] from copied rows, or a `TokenStats` from `row_stats`."""
    if not rows or isinstance(rows[0], np.ndarray):
        return torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, 0)
    cols = list(zip(*rows, strict=True))
    stats = [torch.tensor(c, dtype=torch.float32) for c in cols[1:]]
    return TokenStats(torch.tensor(cols[0], dtype=torch.long), *stats)


class LlamaCppSequence:
    """One sequence id of a `LlamaCppBackend`'s context, with its own KV cells: a Backend of its
    own, whose calls its owner can batch with other sequences' (`LlamaCppBackend.forward_batch`)."""

    summarizes = True  # forward(..., level=) returns `TokenStats` for "stats" / "argmax"

    def __init__(self, owner: LlamaCppBackend, seq_id: int):
        self.owner, self.seq_id, self.info, self.length = owner, seq_id, owner.info, 0

    def __getattr__(self, name: str):  # path, threads, n_ctx, n_vocab, ... are the owner's
        if name == "owner":
            raise AttributeError(name)
        return getattr(self.owner, name)

    def reset(self) -> None:
        self.owner.lib.llama_memory_seq_rm(self.owner.mem, self.seq_id, -1, -1)
        self.length = 0

    def forward(self, ids: list[int], n_rows: int, hidden: bool = False, level: str = FULL):
        return self.owner.forward_batch([(self, ids, n_rows, hidden, level)])[0]

    def crop(self, n: int) -> None:
        if n < self.length:
            if not self.owner.lib.llama_memory_seq_rm(self.owner.mem, self.seq_id, n, -1):
                raise RuntimeError(f"llama.cpp could not crop the cache to {n} tokens")
            self.length = n

    def sync(self) -> None:
        self.owner.lib.llama_synchronize(self.owner.ctx)


class LlamaCppBackend(LlamaCppSequence):
    """One GGUF model and its context; outputs come back as float32 torch tensors on CPU.

    The backend itself is sequence 0. With `n_seq` > 1 the context holds that many sequences,
    each with `n_ctx` cells of its own (`sequences()`), and `forward_batch` decodes calls of
    several of them in one `llama_decode`: the weights are read once for all of them.
    """

    def __init__(
        self,
        path: str | Path,
        info: ModelInfo,
        *,
        threads: int = 1,
        n_ctx: int | None = None,
        n_batch: int = DEFAULT_N_BATCH,
        n_seq: int = 1,
        embeddings_only: bool = False,
        device: str = "cpu",
    ):
        """`embeddings_only`: the caller reads hidden states only (a reward backbone). Graph
        computation then stops at the final norm (llama.cpp's embeddings output, EMBEDDING_NODES)
        through the scheduler's eval callback, so the vocabulary projection after it is never
        computed or read, and forward returns logits of width 0. `device`: where the layers go
        (`gpu_layers`: "cpu" none, "cuda" or "cuda:N" all of them)."""
        lib = _lib()
        n_ctx, n_seq = n_ctx or DEFAULT_N_CTX, max(1, int(n_seq))
        self.lib, self.path, self.threads = lib, Path(path), max(1, int(threads))
        self.model = self.ctx = self.batch = None
        self.info = info
        super().__init__(self, 0)
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = self.n_gpu_layers = gpu_layers(device)
        if _gpu_index(device) is not None:  # one named GPU holds the whole model
            mparams.main_gpu, mparams.split_mode = _gpu_index(device), lib.LLAMA_SPLIT_MODE_NONE
        self.device = device
        self.model = lib.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self.model:
            raise UserError(  # llama.cpp's own reason goes to its log, which is silenced
                f"llama.cpp could not load {self.path}: a model type or tensor layout this "
                f"build does not support, or a damaged file; {GGUF_HINT}"
            )
        cparams = lib.llama_context_default_params()
        cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = n_ctx * n_seq, n_batch, n_batch
        cparams.n_seq_max, cparams.kv_unified = n_seq, False  # one KV stream per sequence
        cparams.n_threads = cparams.n_threads_batch = self.threads
        cparams.embeddings = False
        self.embeddings_only, self.stops = embeddings_only, 0
        if embeddings_only:  # kept referenced: llama.cpp calls it for as long as the context lives
            self._stop_at_norm = lib.ggml_backend_sched_eval_callback(self._stop_at_embeddings)
            cparams.cb_eval, cparams.cb_eval_user_data = self._stop_at_norm, None
        self.ctx = lib.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise UserError(
                f"llama.cpp could not create a context of {n_seq} x {n_ctx} tokens for {path}"
            )
        if lib.llama_pooling_type(self.ctx) != lib.LLAMA_POOLING_TYPE_NONE:  # per-token states
            raise UserError(f"{path} is an embedding model (pooled outputs), not a causal LM")
        self.n_ctx, self.n_batch, self.n_seq = lib.llama_n_ctx(self.ctx) // n_seq, n_batch, n_seq
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.n_embd = lib.llama_model_n_embd(self.model)
        self.mem = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(n_batch, 0, 1)
        self.embeddings = False
        self._scratch = None  # row_stats' work rows
        self._sequences = [self] + [LlamaCppSequence(self, i) for i in range(1, n_seq)]

    def _stop_at_embeddings(self, tensor, ask, _user_data) -> bool:
        """The scheduler's eval callback: asks to observe only the embeddings output; once it is
        computed, returning False ends the graph there (ggml-backend.h: "the scheduler will
        cancel the graph compute")."""
        name = ctypes.string_at(tensor + NAME_OFFSET, 20)
        if not name.startswith(EMBEDDING_NODES):
            return False
        if ask:
            return True
        self.stops += 1
        return False

    def __getattr__(self, name: str):  # the owner has no one to defer to
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def sequences(self, n: int) -> list[LlamaCppSequence]:
        """n sequences of this context (the first is the backend itself)."""
        if n > self.n_seq:
            raise UserError(
                f"{self.path.name} was loaded for {self.n_seq} sequence(s), not {n}; "
                "load it with the batch size (--batch)"
            )
        return self._sequences[:n]

    @torch.inference_mode()
    def forward_batch(self, calls) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Calls (sequence, ids, n_rows, hidden[, level]) of distinct sequences, decoded
        together: one `llama_decode` per `n_batch` tokens of all of them; returns each call's
        (outputs, hidden): logits [n_rows, V], or their `TokenStats` at level "stats" /
        "argmax" (`harness.core.stats`), read from llama.cpp's buffer without copying rows."""
        for seq, ids, n_rows, *_ in calls:
            if not 1 <= n_rows <= len(ids):
                raise ValueError(f"n_rows must be in 1..{len(ids)}, got {n_rows}")
            if seq.length + len(ids) > self.n_ctx:
                raise UserError(
                    f"llama.cpp context of {self.n_ctx} tokens is too small for "
                    f"{seq.length + len(ids)} tokens; raise --n-ctx"
                )
        results: list = [None] * len(calls)
        for hidden in (False, True):  # embeddings on only for the calls that read them
            part = [j for j, c in enumerate(calls) if c[3] == hidden]
            if part:
                self._decode_calls([calls[j] for j in part], hidden, results, part)
        return results

    def _outputs(self, i: int, level: str, into: list) -> None:
        """Append batch row i's logits at `level` to `into`: the row copied ("full"), or its
        summary computed on llama.cpp's own buffer (`row_stats`)."""
        width = 0 if self.embeddings_only else self.n_vocab
        if level == FULL or not width:
            into.append(self._row(self.lib.llama_get_logits_ith, i, width))
            return
        if self._scratch is None:
            self._scratch = np.empty((2, width), dtype=np.float32)
        row = self._view(self.lib.llama_get_logits_ith, i, width)
        into.append(row_stats(row, level, self._scratch))

    def _decode_calls(self, calls, hidden: bool, results: list, where: list[int]) -> None:
        if hidden != self.embeddings:
            self.lib.llama_set_embeddings(self.ctx, hidden)
            self.embeddings = hidden
        # (call, position in the call, token, wants output) for every fed token, call by call
        items = [
            (j, k, tok, k >= len(ids) - n_rows)
            for j, (_, ids, n_rows, *_) in enumerate(calls)
            for k, tok in enumerate(ids)
        ]
        logits: list[list] = [[] for _ in calls]
        states: list[list] = [[] for _ in calls]
        for start in range(0, len(items), self.n_batch):
            chunk = items[start : start + self.n_batch]
            b = self.batch
            for i, (j, k, tok, out) in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = calls[j][0].length + k
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = calls[j][0].seq_id
                b.logits[i] = out or hidden  # with embeddings llama.cpp outputs every row
            b.n_tokens = len(chunk)
            rc = self.lib.llama_decode(self.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed with status {rc} ({self.path.name})")
            if self.embeddings_only and not self.stops:
                raise RuntimeError(
                    f"{self.path.name}: llama.cpp's graph has no embeddings node to stop at "
                    f"{EMBEDDING_NODES}; load it without embeddings_only"
                )
            for i, (j, _, _, out) in enumerate(chunk):
                if out:
                    self._outputs(i, calls[j][4] if len(calls[j]) > 4 else FULL, logits[j])
                    if hidden:
                        states[j].append(
                            self._row(self.lib.llama_get_embeddings_ith, i, self.n_embd)
                        )
        for j, (seq, ids, *_) in enumerate(calls):
            seq.length += len(ids)
            h = torch.from_numpy(np.stack(states[j])) if hidden else None
            results[where[j]] = (_stacked(logits[j]), h)

    def _row(self, getter, j: int, width: int) -> np.ndarray:
        if not width:
            return np.zeros(0, dtype=np.float32)
        return self._view(getter, j, width).copy()

    def _view(self, getter, j: int, width: int) -> np.ndarray:
        """Batch row j of llama.cpp's output buffer, not copied: valid until the next decode."""
        ptr = getter(self.ctx, j)
        if not ptr:
            raise RuntimeError(f"llama.cpp returned no output for batch row {j}")
        return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), (width,))

    def close(self) -> None:
        """Free the context and the model (also done when the backend is garbage-collected)."""
        lib = self.lib
        if self.batch is not None:
            lib.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            lib.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            lib.llama_model_free(self.model)
            self.model = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn the library down
            pass
