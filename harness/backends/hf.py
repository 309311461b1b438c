"""The transformers backend: a causal LM over a preallocated KV cache of n sequences (slots),
batched across sequences (GPU, and CPU for models with no GGUF). See `harness.backends` for the
protocol.

    backend = HFBackend(model, info)           # sequence 0 of the model
    seqs = backend.sequences(8)                # 8 slots over the same weights (backend is the first)
    backend.forward_batch([(seqs[0], [5, 6, 7], 1, False), (seqs[3], [9], 1, False)])

`forward_batch` runs calls of several slots as ONE forward pass over ragged rows: each row has
its own cache length and its own number of new tokens. Rows are left-padded to the longest
call; every token is written into its slot's cache at its own position (`SlotCache`), and an
additive mask lets each row see its own slot's first `length + t + 1` positions only. Padding
positions write past their slot's end, which nothing reads before a real token overwrites it.
The cache is allocated once per model (`n_ctx` tokens a slot, doubled when a sequence outgrows
it), never per step.

On CUDA every pass whose calls feed up to 32 tokens each (decode steps, a model catching up on
the other's tokens, a verify of k + 1 drafted tokens) runs as a static pass of a bucketed shape
(`harness.backends.hf_static`: feed length, rows and key length each rounded up to a bucket,
rows left-padded, padding kept out of attention and out of the cache) replayed as a captured
CUDA graph (`torch.cuda.CUDAGraph`), so a pass is not bound by kernel launches. A longer feed
(a prompt) is fed in chunks of 32 tokens, each such a pass (`_issue`). On a CPU `step="static"` runs the same padded function
eagerly, so tests check that it equals the ragged pass (tests/test_hf_static.py).

Outputs: full logits rows as float32 on CPU, or their summary computed on the model's device
(`harness.core.stats`: level "stats" / "argmax"), so a greedy step copies a few numbers per row
to the host instead of a vocabulary-wide row.

Numerics: in float32 a batched row equals the same call alone within ~1e-6 (the same kernels on
other shapes; masked keys add exp(-inf) = 0). In bfloat16 the matrix products of a batch of
other shapes round differently: logits move by up to a few hundredths (docs/speed.md), which can
flip a greedy near-tie, so a batched bf16 run equals the unbatched one up to such tokens.

A subclass with a forward of its own (the reward model's network) keeps the one-sequence
`DynamicCache` behaviour: one call at a time, no slots.
"""

from __future__ import annotations

import copy

import torch

from harness.backends.hf_static import FEED_BUCKETS, StaticSteps
from harness.backends.kv_slots import SlotCache, key_bucket, supports_slots  # noqa: F401
from harness.core.records import ModelInfo
from harness.core.stats import ARGMAX, FULL, LEVELS, TokenStats, summary_tensors

DEFAULT_N_CTX = 4096  # tokens a slot holds before its cache grows (as llama.cpp's default)
# How a pass of feeds up to 32 tokens runs: "graph" (the static pass of its bucketed shape
# captured as a CUDA graph; the default on CUDA), "static" (the same function, eager: what the
# graph replays, testable on a CPU) or "ragged" (the calls' rows only; the CPU default)
STEPS = ("graph", "static", "ragged")


def cache_kwarg(model) -> str:
    """The keyword `model`'s forward takes its KV cache by: `cache` in recent transformers
    (which warn on the older `past_key_values` and drop it in 5.40), else `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def returned_cache(out):
    """The KV cache a transformers model output carries, under either name."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


class HFSequence:
    """One slot of an `HFBackend`'s model: a Backend of its own, whose calls its owner batches
    with other slots' (`HFBackend.forward_batch`)."""

    summarizes = True  # forward(..., level=) returns `TokenStats` for "stats" / "argmax"

    def __init__(self, owner: HFBackend, slot: int):
        self.owner, self.slot, self.info, self.length = owner, slot, owner.info, 0

    def __getattr__(self, name: str):  # model, device, n_vocab, ... are the owner's
        if name == "owner":
            raise AttributeError(name)
        return getattr(self.owner, name)

    def reset(self) -> None:
        self.length = 0

    def forward(self, ids: list[int], n_rows: int, hidden: bool = False, level: str = FULL):
        return self.owner.forward_batch([(self, ids, n_rows, hidden, level)])[0]

    def crop(self, n: int) -> None:
        self.length = min(self.length, n)  # positions past it are overwritten before any read

    def sync(self) -> None:
        if self.owner.device.type == "cuda":
            torch.cuda.synchronize(self.owner.device)


class HFBackend(HFSequence):
    """A transformers causal LM; outputs come back as float32 on CPU (or summarized, `level`).

    The backend itself is slot 0. `sequences(n)` gives n slots over the same weights and one
    cache; `forward_batch` runs calls of several of them in one pass. `n_ctx`: tokens a slot
    holds before its cache grows; `step`: how a pass of short feeds runs (STEPS; default
    "graph" on CUDA, else "ragged")."""

    def __init__(self, model, info: ModelInfo, n_ctx: int | None = None, step: str | None = None):
        self.model, self.info = model.eval(), info
        self.cache_kwarg = cache_kwarg(model)
        self.device = next(model.parameters()).device
        self.cache = None  # the one-sequence DynamicCache of a subclass with its own forward
        super().__init__(self, 0)
        # a subclass with its own forward runs its own network: it keeps the DynamicCache path
        self.slotted = type(self).forward is HFBackend.forward and supports_slots(model)
        self.n_ctx = n_ctx or DEFAULT_N_CTX
        self.kv: SlotCache | None = None
        self._sequences: list[HFSequence] = [self]
        self.n_active = 1  # slots in use: the last `sequences(n)`
        if step not in (None, *STEPS):
            raise ValueError(f"step must be one of {STEPS}, got {step!r}")
        # how a pass of short feeds runs (STEPS)
        self.step = step or ("graph" if self.device.type == "cuda" else "ragged")
        self.static = StaticSteps(self)
        # whether a pass issued by `launch_batch` runs while the host goes on (CUDA)
        self.launches = self.device.type == "cuda" and self.slotted

    def __getattr__(self, name: str):  # the owner has no one to defer to
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def n_vocab(self) -> int:
        """Rows of the output layer (the vocabulary the logits cover, padding included)."""
        return self.model.get_output_embeddings().weight.shape[0]

    def sequences(self, n: int) -> list:
        """n sequences over the same weights (the first is the backend itself); a model that
        cannot use slots gets one-sequence copies, run one call at a time."""
        if not self.slotted:
            return [self] + [self._fresh() for _ in range(n - 1)]
        while len(self._sequences) < n:
            self._sequences.append(HFSequence(self, len(self._sequences)))
        self.n_active = n  # the slots a one-token step covers
        if self.kv is not None and self.kv.slots < n:
            self._resize(n, self.kv.capacity)
        return self._sequences[:n]

    def _fresh(self) -> HFBackend:
        other = copy.copy(self)
        other.cache, other.length = None, 0
        return other

    def reset(self) -> None:
        self.length = 0
        if not self.slotted:
            from transformers import DynamicCache

            self.cache = DynamicCache()

    def crop(self, n: int) -> None:
        if n < self.length and not self.slotted:
            # a negative count removes tokens from the end in every transformers version we support
            self.cache.crop(n - self.length)
        self.length = min(self.length, n)

    def forward(self, ids: list[int], n_rows: int, hidden: bool = False, level: str = FULL):
        if not self.slotted:
            return self._dynamic_forward(ids, n_rows, hidden)
        return self.forward_batch([(self, ids, n_rows, hidden, level)])[0]

    @torch.inference_mode()
    def _dynamic_forward(self, ids: list[int], n_rows: int, hidden: bool):
        if self.cache is None:
            self.reset()
        out = self.model(
            input_ids=torch.tensor([ids], device=self.device),
            use_cache=True,
            output_hidden_states=hidden,
            logits_to_keep=n_rows,
            **{self.cache_kwarg: self.cache},
        )
        self.cache = returned_cache(out)
        self.length += len(ids)
        logits = out.logits[0, -n_rows:].float().cpu()
        h = out.hidden_states[-1][0, -n_rows:].float().cpu() if hidden else None
        return logits, h

    @torch.inference_mode()
    def forward_batch(self, calls) -> list:
        """Calls (sequence, ids, n_rows, hidden[, level]) of distinct slots, run as one pass;
        returns each call's (outputs, hidden): logits [n_rows, V] float32 on CPU, or their
        `TokenStats` at level "stats" / "argmax", and hidden [n_rows, H] or None."""
        if not self.slotted:  # one call at a time, each on its own DynamicCache
            return [c[0].forward(c[1], c[2], c[3]) for c in calls]
        return self._read(calls, self._issue(calls))

    @torch.inference_mode()
    def launch_batch(self, calls):
        """`forward_batch` in two halves: the pass is issued now and the returned function
        reads its outputs. On CUDA (`launches`) the device runs the pass while the host does
        other work (the scheduler runs a CPU model's pass meanwhile); the function waits for it."""
        if not self.slotted:
            out = self.forward_batch(calls)
            return lambda: out
        issued = self._issue(calls)
        return torch.inference_mode()(lambda: self._read(calls, issued))

    def _issue(self, calls) -> list:
        """The calls' passes, issued; the slots' lengths advanced. One pass (static or ragged),
        or with static passes, a call feeding more than the largest feed bucket (a prompt) fed
        in chunks of it, each chunk a static pass (the other calls ride in the first). Returns
        per pass (which calls end in it, its calls, the device tensors `_outputs` reads)."""
        for _, ids, n_rows, *_ in calls:
            if not 1 <= n_rows <= len(ids):
                raise ValueError(f"n_rows must be in 1..{len(ids)}, got {n_rows}")
        longest = max(len(c[1]) for c in calls)
        self._ensure(len(self._sequences), max(c[0].length for c in calls) + longest + 1)
        size = FEED_BUCKETS[-1]
        chunks = [[c[1][i : i + size] for i in range(0, len(c[1]), size)] for c in calls]
        if (
            self.step == "ragged"
            or longest <= size
            or any(c[2] > len(ch[-1]) for c, ch in zip(calls, chunks, strict=True))
        ):  # one pass; rows asked for past the last chunk (a query router's prompt) run ragged
            return [(list(range(len(calls))), calls, self._pass_of(calls))]
        passes = []
        for i in range(max(map(len, chunks))):
            idx = [j for j, ch in enumerate(chunks) if len(ch) > i]
            last = [len(chunks[j]) == i + 1 for j in idx]
            sub = [
                (calls[j][0], chunks[j][i]) + (calls[j][2:] if end else (1, False, ARGMAX))
                for j, end in zip(idx, last, strict=True)
            ]
            passes.append(
                (
                    [j if end else None for j, end in zip(idx, last, strict=True)],
                    sub,
                    self._pass_of(sub),
                )
            )
        return passes

    def _pass_of(self, calls):
        """One pass of the calls, static where a static shape holds them, else ragged."""
        out = self.static.run(calls) if self.step != "ragged" else None
        out = out if out is not None else self._ragged(calls)
        for seq, ids, *_ in calls:
            seq.length += len(ids)
        return out

    def _read(self, calls, passes) -> list:
        """Each call's outputs (`_outputs`) from the pass its feed ended in."""
        results = [None] * len(calls)
        for ends, sub, out in passes:
            for j, result in zip(ends, self._outputs(sub, *out), strict=True):
                if j is not None:
                    results[j] = result
        return results

    # --- the ragged pass (any calls) ------------------------------------------------------

    def _ragged(self, calls):
        """One eager pass over the calls' rows, left-padded to the longest: returns logits
        [B, R, V] of the last R = max(n_rows) positions, hidden [B, T, H] or None, and their
        device summary (`summary_tensors`) flattened to [B * R]."""
        b, t = len(calls), max(len(c[1]) for c in calls)
        dev = self.device
        if b == 1:
            return self._one_call(calls[0])
        lengths = torch.tensor([c[0].length for c in calls], device=dev)[:, None]
        n_new = torch.tensor([len(c[1]) for c in calls], device=dev)[:, None]
        ids = torch.zeros(b, t, dtype=torch.long)
        for i, c in enumerate(calls):
            ids[i, t - len(c[1]) :] = torch.tensor(c[1])
        col = torch.arange(t, device=dev)[None]
        pad = t - n_new
        # real tokens at L + (col - pad); padding at L + n_new + col: past the slot's end
        pos = torch.where(col >= pad, lengths + col - pad, lengths + n_new + col)
        slots = [c[0].slot for c in calls]
        consecutive = slots == list(range(slots[0], slots[0] + b))
        read = slice(slots[0], slots[0] + b) if consecutive else torch.tensor(slots, device=dev)
        rows = torch.tensor(slots, device=dev)[:, None].expand(b, t)
        n_keys = int(max(c[0].length for c in calls)) + t
        r = max(c[2] for c in calls)
        hidden = any(c[3] for c in calls)
        logits, hid = self._pass(ids.to(dev), pos, rows, read, n_keys, r, hidden)
        summarized = any(len(c) > 4 and c[4] != FULL for c in calls)
        stats = summary_tensors(logits.reshape(b * r, -1), self._level(calls)) if summarized else ()
        return logits, hid, stats

    def _one_call(self, call):
        """`_ragged` for one call: no padding, and no mask for one token (it sees every key)."""
        seq, new, n_rows, hidden, *level = call
        start, t = seq.length, len(new)
        pos = torch.arange(start, start + t, device=self.device)[None]
        ids = torch.tensor([new], device=self.device)
        where = (seq.slot, slice(start, start + t))
        read = slice(seq.slot, seq.slot + 1)
        logits, hid = self._pass(ids, pos, where, read, start + t, n_rows, hidden, t > 1)
        summarized = level and level[0] != FULL
        return logits, hid, summary_tensors(logits[0], level[0]) if summarized else ()

    def _pass(self, ids, pos, rows, read, n_keys: int, keep: int, hidden: bool, masked=True):
        """The model over ids [B, T] at positions pos, written into `rows`' slots (or `rows` =
        (slot, slice) for one row), each row attending over its slot's positions <= its own
        (`masked` False: every one of the n_keys): (logits [B, keep, V], hidden or None)."""
        kv = self.kv
        write_rows, write_pos = rows if isinstance(rows, tuple) else (rows, pos)
        kv.write_rows, kv.write_pos, kv.read, kv.n_keys = write_rows, write_pos, read, n_keys
        mask = self._mask(pos, n_keys) if masked else None
        out = self.model(
            input_ids=ids,
            position_ids=pos,
            attention_mask={"full_attention": mask},
            use_cache=True,
            output_hidden_states=hidden,
            logits_to_keep=keep,
            **{self.cache_kwarg: kv},
        )
        return out.logits, (out.hidden_states[-1] if hidden else None)

    def _mask(self, pos: torch.Tensor, n_keys: int) -> torch.Tensor:
        """[B, 1, T, n_keys] additive mask: row b's token t sees the keys at positions <= pos."""
        keys = torch.arange(n_keys, device=self.device)
        allowed = keys[None, None, :] <= pos[:, :, None]  # [B, T, n_keys]
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]

    # --- static passes (captured on CUDA: `harness.backends.hf_static`) ---------------------

    @property
    def graphs(self) -> dict:
        """Captured static passes by `Shape` (None: the capture failed, it runs eagerly)."""
        return self.static.graphs

    @property
    def graph_failures(self) -> list[str]:
        """Why each failed capture failed."""
        return self.static.failures

    @torch.inference_mode()
    def capture_steps(self, tokens: int) -> None:
        """Capture now, for the current slots, every static pass a sequence of up to `tokens`
        positions can need (with step "graph"; else nothing): a timed run then holds no
        capture."""
        if self.step == "graph" and self.slotted:
            self.static.capture_all(tokens)

    # --- outputs -------------------------------------------------------------------------

    @staticmethod
    def _level(calls) -> str:
        """The most any summarized call asks for ("stats" or "argmax")."""
        asked = [c[4] for c in calls if len(c) > 4 and c[4] != FULL] or [ARGMAX]
        return max(asked, key=LEVELS.index)

    def _outputs(self, calls, logits, hid, stats) -> list:
        """Each call's (outputs, hidden) on the CPU: full rows only for calls at level "full",
        one copy of the summaries for the others."""
        r = logits.shape[1]
        host = torch.stack([s.float() for s in stats]).cpu() if stats else None  # [4|1, B * R]
        results = []
        for i, (_, _, n_rows, hidden, *level) in enumerate(calls):
            level = level[0] if level else FULL
            if level == FULL:
                out = logits[i, r - n_rows :].float().cpu()
            else:
                cols = host[:, i * r + r - n_rows : (i + 1) * r]
                fields = [cols[0].long()] + ([] if level == ARGMAX else list(cols[1:4]))
                out = TokenStats(*fields)
            h = hid[i, hid.shape[1] - n_rows :].float().cpu() if hidden else None
            results.append((out, h))
        return results

    # --- the cache -----------------------------------------------------------------------

    def _ensure(self, slots: int, tokens: int) -> None:
        """A cache of at least `slots` slots and `tokens` positions (doubling capacity)."""
        if self.kv is None:
            cap = max(self.n_ctx, tokens)
            self.kv = SlotCache(slots, cap)
        elif tokens > self.kv.capacity or slots > self.kv.slots:
            cap = self.kv.capacity
            while cap < tokens:
                cap *= 2
            self._resize(max(slots, self.kv.slots), cap)

    def _resize(self, slots: int, capacity: int) -> None:
        self.kv = self.kv.resized(slots, capacity)
        self.static.clear()  # captured over the old buffers

    def kv_nbytes(self) -> int:
        """Bytes the slots' KV cache holds (0 before the first pass)."""
        return self.kv.nbytes() if self.kv is not None else 0

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
