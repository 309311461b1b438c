"""The static passes of the transformers backend (`harness.backends.hf`): the calls of one batch
fed as rows of a fixed shape, so that on CUDA each shape replays a captured CUDA graph (as SGLang
and vLLM capture their decode and verify passes) instead of launching every kernel again.

A pass's shape (`Shape`) is four numbers, each from a small set, so a few graphs cover a run:

    feed    tokens every row feeds: the longest call's count rounded up to a FEED_BUCKETS entry
            (1: the decode step; 2-32: a model catching up on j tokens the other wrote, a
            verify of k + 1 drafted tokens). The backend feeds a longer one (a prompt) in
            chunks of the largest bucket, each a static pass.
    rows    batch rows. Row i is slot i for every slot in use (calls of more than half the
            slots, and every one-token step: a slot with no call feeds padding at its own end),
            or, `gather`, the calls' slots in call order plus idle slots up to a power of two
            (`row_bucket`), their caches read by index, so a catch-up of a few generations at
            B = 64 does not compute 64 rows of padding.
    keys    the key positions every row attends over: the calls' longest sequence rounded up
            (`key_bucket`: powers of two from 256, at most the cache's capacity).
    gather  as above.

Padding stays out of attention and out of the cache. Each row is left-padded to `feed`: its real
tokens sit at its slot's next positions, its padding is written past them (length + fed + i),
where nothing reads before a real token of a later pass overwrites it, and the mask lets a token
see only keys at positions <= its own, so a real token never sees a padded key. The last
`keep` = min(feed, MAX_KEEP) columns come back (logits, hidden states and their summary), which
hold every row a call asks for (a call asking for more runs the ragged pass).

On a CPU (`step="static"`) the same padded function runs eagerly, so tests check that it equals
the ragged pass (tests/test_hf_static.py). A capture that fails is recorded (`failures`), said
once on stderr, and its shape runs eagerly from then on.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import torch

from harness.backends.kv_slots import MIN_KEY_BUCKET, key_bucket
from harness.core.stats import FULL, summary_tensors

FEED_BUCKETS = (1, 2, 4, 8, 16, 32)  # tokens a static pass feeds per row
MAX_KEEP = 8  # output columns a static pass returns per row (a verify of up to 7 drafted tokens)


@dataclass(frozen=True)
class Shape:
    """The shape of one static pass: one captured graph per shape."""

    rows: int  # batch rows of the pass
    feed: int  # tokens each row feeds, padding included (a FEED_BUCKETS entry)
    keys: int  # key positions each row attends over (a `key_bucket`)
    gather: bool  # rows are chosen slots read by index; else row i is slot i, every slot

    @property
    def keep(self) -> int:
        """Output columns per row: the last min(feed, MAX_KEEP)."""
        return min(self.feed, MAX_KEEP)

    def describe(self) -> str:
        kind = "gathered rows" if self.gather else "rows"
        return f"{self.rows} {kind} x {self.feed} tokens, {self.keys} keys"


def feed_bucket(n: int) -> int | None:
    """The FEED_BUCKETS entry a feed of n tokens is padded to; None past the largest."""
    return next((b for b in FEED_BUCKETS if b >= n), None)


def row_bucket(n_calls: int, n_slots: int, feed: int) -> tuple[int, bool]:
    """(rows, gather) of a pass of n_calls calls over n_slots slots: every slot in order for a
    one-token step or calls of more than half the slots; else the next power of two of the
    calls, at least a quarter of the slots (so B = 64 captures 16, 32 and 64 rows)."""
    if feed == 1 or 2 * n_calls > n_slots:
        return n_slots, False
    floor = _pow2(math.ceil(n_slots / 4))
    return min(n_slots, max(floor, _pow2(n_calls))), True


def _pow2(n: int) -> int:
    return 1 << math.ceil(math.log2(max(n, 1)))


class StaticSteps:
    """The static passes of one `HFBackend`, and on CUDA their captured graphs by `Shape`."""

    def __init__(self, backend):
        self.backend = backend  # its `step` says whether to capture ("graph") or run eagerly
        self.graphs: dict[Shape, tuple | None] = {}  # None: its capture failed, runs eagerly
        self.failures: list[str] = []  # why each failed capture failed
        self._pool = None

    def clear(self) -> None:
        """Forget every graph (the cache they were captured over was reallocated)."""
        self.graphs.clear()
        # with its last graph gone PyTorch releases their memory pool: a capture into that
        # pool's handle again fails ("use_count > 0"), so the next capture takes a new one
        self._pool = None

    # --- one pass ----------------------------------------------------------------------------

    def run(self, calls):
        """The calls (sequence, ids, n_rows, hidden[, level]) as one static pass: (logits
        [B, keep, V], hidden or None, summary tensors [B * keep]) in call order, as the ragged
        pass returns them; None when no static shape holds them (a feed past the largest
        bucket, or more rows asked for than a pass keeps)."""
        planned = self.plan(calls)
        if planned is None:
            return None
        shape, inputs, row_of = planned
        dev = self.backend.device
        # every host-to-device copy before the pass: after it, one would wait for the device
        idx = torch.tensor(row_of).to(dev, non_blocking=True)
        graph = None
        if self.backend.step == "graph":
            graph = self.graphs[shape] if shape in self.graphs else self._capture(shape, inputs)
        if graph is None:
            out = self.forward(*(t.to(dev, non_blocking=True) for t in inputs), shape)
        else:
            g, static, out = graph
            for into, value in zip(static, inputs, strict=True):
                into.copy_(value, non_blocking=True)
            g.replay()
        return self._select(calls, out, idx, shape)

    def plan(self, calls):
        """(shape, (ids, pos, slots) on the host, each call's row), or None (see `run`)."""
        b = self.backend
        feed = feed_bucket(max(len(c[1]) for c in calls))
        if feed is None or max(c[2] for c in calls) > min(feed, MAX_KEEP):
            return None
        n = max(b.n_active, max(c[0].slot for c in calls) + 1)
        rows, gather = row_bucket(len(calls), n, feed)
        called = {c[0].slot: c[1] for c in calls}
        if gather:
            idle = [s for s in range(n) if s not in called]
            slots = [c[0].slot for c in calls] + idle[: rows - len(calls)]
        else:
            slots = list(range(n))
        lengths = [b._sequences[s].length for s in slots]
        b._ensure(len(b._sequences), max(lengths) + feed + 1)
        fed = [called.get(s, []) for s in slots]
        ids, pos = padded_rows(fed, lengths, feed)
        # keys: the calls' own (a padding row's outputs are never read, whatever it sees)
        top = max(c[0].length + len(c[1]) for c in calls)
        shape = Shape(rows, feed, key_bucket(top, b.kv.capacity), gather)
        where = {s: i for i, s in enumerate(slots)}
        return shape, (ids, pos, torch.tensor(slots)), [where[c[0].slot] for c in calls]

    def forward(self, ids, pos, slots, shape: Shape):
        """The static pass: ids, pos [rows, feed] and slots [rows] on the device; every row's
        tokens written at pos of its slot, each attending over positions <= its own within the
        first `shape.keys`. Returns (logits [rows, keep, V], hidden [rows, keep, H], summary
        tensors [rows * keep]): static shapes, no host synchronization, so CUDA can capture it."""
        read = slots if shape.gather else slice(0, shape.rows)
        logits, hid = self.backend._pass(
            ids, pos, slots[:, None], read, shape.keys, shape.keep, True
        )
        hid = hid[:, -shape.keep :]
        return (logits, hid, *summary_tensors(logits.reshape(-1, logits.shape[-1]), "stats"))

    def _select(self, calls, out, idx: torch.Tensor, shape: Shape):
        """The calls' rows (`idx`, on the device) of a static pass's outputs, in call order
        (logits gathered only when a call reads them whole)."""
        logits, hid, *stats = out
        whole = any(len(c) < 5 or c[4] == FULL for c in calls)
        return (
            logits.index_select(0, idx) if whole else logits,
            hid.index_select(0, idx) if any(c[3] for c in calls) else None,
            tuple(s.view(shape.rows, -1).index_select(0, idx).reshape(-1) for s in stats),
        )

    # --- capture -----------------------------------------------------------------------------

    def _capture(self, shape: Shape, inputs=None):
        """Capture `forward` for `shape` over static copies of `inputs` (default: every row
        padding at its slot's end); None, and eager from then on, if the model does something a
        graph cannot hold (the reason is kept in `failures` and said once on stderr)."""
        dev = self.backend.device
        static = tuple(t.to(dev) for t in (inputs or self._idle_inputs(shape)))
        try:
            stream = torch.cuda.Stream(dev)
            stream.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(stream):  # warm-up writes: this pass's own, or past the ends
                for _ in range(2):
                    self.forward(*static, shape)
            torch.cuda.current_stream(dev).wait_stream(stream)
            self._pool = self._pool or torch.cuda.graph_pool_handle()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self._pool):
                out = self.forward(*static, shape)
        except Exception as e:  # noqa: BLE001 - fall back to eager, and say so
            self.graphs[shape] = None
            self.failures.append(f"{shape.describe()}: {type(e).__name__}: {e}")
            print(
                f"(CUDA graph capture failed, {shape.describe()} run eagerly: {e})", file=sys.stderr
            )
            return None
        self.graphs[shape] = (g, static, out)
        return self.graphs[shape]

    def _idle_inputs(self, shape: Shape):
        """Inputs of `shape` in which every row is padding at the end of slot i."""
        lengths = [s.length for s in self.backend._sequences[: shape.rows]]
        ids, pos = padded_rows([[]] * shape.rows, lengths, shape.feed)
        return ids, pos, torch.arange(shape.rows)

    def capture_all(self, tokens: int) -> None:
        """Capture now, for the slots in use, every shape a sequence of up to `tokens`
        positions can need (every feed bucket, row bucket and key bucket), so that a timed run
        holds no capture."""
        b = self.backend
        n = b.n_active
        longest = max([tokens] + [s.length for s in b._sequences[:n]])
        b._ensure(len(b._sequences), longest + FEED_BUCKETS[-1] + 1)
        keys, k = [], MIN_KEY_BUCKET
        while not keys or keys[-1] < key_bucket(tokens, b.kv.capacity):
            keys.append(key_bucket(k, b.kv.capacity))
            k = keys[-1] * 2
        for feed in FEED_BUCKETS:
            for rows, gather in sorted({row_bucket(c, n, feed) for c in range(1, n + 1)}):
                for key in keys:
                    shape = Shape(rows, feed, key, gather)
                    if shape not in self.graphs:
                        self._capture(shape)

    def captured(self) -> dict[int, int]:
        """Graphs captured (not failed), by feed bucket."""
        out: dict[int, int] = {}
        for shape, g in self.graphs.items():
            if g is not None:
                out[shape.feed] = out.get(shape.feed, 0) + 1
        return out


def padded_rows(fed: list[list[int]], lengths: list[int], feed: int):
    """ids, pos [rows, feed]: row i's tokens `fed[i]` left-padded to `feed`, the real ones at
    positions lengths[i] + 0.. and the padding past them (lengths[i] + len(fed[i]) + col).

    >>> padded_rows([[7, 8], []], [5, 2], 3)[1].tolist()
    [[7, 5, 6], [2, 3, 4]]
    """
    ids = torch.tensor([[0] * (feed - len(f)) + list(f) for f in fed], dtype=torch.long)
    n = torch.tensor([len(f) for f in fed])[:, None]
    start = torch.tensor(lengths)[:, None]
    col = torch.arange(feed)[None]
    pad = feed - n
    return ids, torch.where(col >= pad, start + col - pad, start + n + col)
