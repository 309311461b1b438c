"""The KV cache of the transformers backend (`harness.backends.hf`): one preallocated buffer for
every sequence in flight (`SlotCache`), which model families can use it (`supports_slots`), and
the key-length buckets of the CUDA-graph decode step (`key_bucket`)."""

from __future__ import annotations

import math

import torch
from transformers.cache_utils import Cache

MIN_KEY_BUCKET = 256  # smallest key length a captured decode step attends over


def supports_slots(model) -> bool:
    """Whether `model` can decode over a `SlotCache`: full attention in every layer (no sliding
    window, whose layers take a mask of their own) through sdpa or eager attention, which take
    the explicit per-row mask."""
    config = model.config
    types = getattr(config, "layer_types", None) or ["full_attention"]
    impl = getattr(config, "_attn_implementation", None) or "eager"
    return (
        set(types) == {"full_attention"}
        and not getattr(config, "use_sliding_window", False)
        and impl in ("sdpa", "eager")
    )


class SlotCache(Cache):
    """The KV cache of every slot of one model, allocated once: per layer, keys and values of
    shape [slots, kv_heads, capacity, head_dim] in the model's dtype, made at the first pass
    (shapes read from the keys that pass writes).

    Before each pass the backend says where the pass's tokens go (`write_rows`, `write_pos`:
    [B, T] slot and position of every fed token, or for one row a slot and a slice) and what its
    rows attend over (`read`: the slots of the batch rows, a range or an index tensor; `n_keys`:
    the first positions of each).
    transformers' attention layers then call `update` with the new keys and values."""

    # Cache's own __init__ (a list of per-layer caches) is not called: transformers only calls
    # `update` on this one (masks and positions are given to the model explicitly)
    def __init__(self, slots: int, capacity: int):
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.slots, self.capacity = slots, capacity
        self.write_rows = self.write_pos = None
        self.read: slice | torch.Tensor = slice(0, 1)
        self.n_keys = 0

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        """Write this pass's keys/values [B, kv_heads, T, head_dim] at their slots' positions;
        return the keys/values the batch rows attend over, [B, kv_heads, n_keys, head_dim]."""
        if layer_idx == len(self.k):
            b, h, _, d = key_states.shape
            shape = (self.slots, h, self.capacity, d)
            self.k.append(key_states.new_zeros(shape))
            self.v.append(value_states.new_zeros(shape))
        k, v = self.k[layer_idx], self.v[layer_idx]
        if isinstance(self.write_pos, slice):  # one row, no padding: a plain copy
            k[self.write_rows, :, self.write_pos] = key_states[0]
            v[self.write_rows, :, self.write_pos] = value_states[0]
        else:
            k[self.write_rows, :, self.write_pos] = key_states.transpose(1, 2)
            v[self.write_rows, :, self.write_pos] = value_states.transpose(1, 2)
        if isinstance(self.read, slice):  # consecutive slots: a view, no copy
            return k[self.read, :, : self.n_keys], v[self.read, :, : self.n_keys]
        # the rows' first n_keys positions only (the copy is what a gathered pass reads)
        return (
            k[:, :, : self.n_keys].index_select(0, self.read),
            v[:, :, : self.n_keys].index_select(0, self.read),
        )

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are given explicitly; transformers only asks when they are not

    def resized(self, slots: int, capacity: int) -> SlotCache:
        """A cache of `slots` x `capacity` holding this one's contents (slots and positions that
        fit); a new allocation, so captured graphs of the old one no longer apply."""
        new = SlotCache(slots, capacity)
        for old_k, old_v in zip(self.k, self.v, strict=True):
            s, c = min(slots, self.slots), min(capacity, self.capacity)
            for old, into in ((old_k, new.k), (old_v, new.v)):
                buf = old.new_zeros((slots, old.shape[1], capacity, old.shape[3]))
                buf[:s, :, :c] = old[:s, :, :c]
                into.append(buf)
        return new

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


def key_bucket(n: int, capacity: int) -> int:
    """The key length a one-token step of a sequence of n positions attends over: the next power
    of two from MIN_KEY_BUCKET, at most the capacity."""
    return min(capacity, max(MIN_KEY_BUCKET, 1 << math.ceil(math.log2(max(n, 1)))))
