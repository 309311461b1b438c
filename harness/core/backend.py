"""The backend protocol: the only way the decoding core reaches a model.

A backend holds one model and its KV cache for one generation. The protocol is three calls:

    forward(ids, n_rows, hidden) -> (outputs [n_rows, V], hidden [n_rows, H] | None)
        append `ids` to the cache; return the outputs at the last `n_rows` fed positions
        (next-token logits for a language model, one scalar per token for a reward model)
    crop(n)  -> keep only the first n cached tokens (rollback)
    reset()  -> empty the cache for a new prompt

plus `length` (tokens in the cache), `info` (a `ModelInfo` for the cost model) and `sync()`
(wait for the device so timers measure finished work). The implementations live in
`harness.backends`.

Batching (`harness.core.scheduler.generate_many`): `sequences(backend, n)` gives n backends over
the same model, one per generation in flight. A backend whose sequences share an `owner` with a
`forward_batch(calls)` runs their calls together. An owner with `launches` true (transformers on
CUDA) also has `launch_batch(calls)`, which issues the pass and returns a function that reads its
outputs: the scheduler runs a CPU model's calls while that device works.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from harness.core.records import ModelInfo
from harness.errors import UserError

if TYPE_CHECKING:  # only the protocol's annotations name it: importing this module loads no torch
    import torch


class Backend(Protocol):
    info: ModelInfo
    length: int

    def reset(self) -> None: ...

    def forward(
        self, ids: list[int], n_rows: int, hidden: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def crop(self, n: int) -> None: ...

    def sync(self) -> None: ...


def sequences(backend: Backend, n: int) -> list[Backend]:
    """n backends over `backend`'s model for n generations in flight (the first is `backend`)."""
    if hasattr(backend, "sequences"):
        return backend.sequences(n)
    if n == 1:
        return [backend]
    raise UserError(f"{type(backend).__name__} cannot decode {n} sequences at once; use --batch 1")
