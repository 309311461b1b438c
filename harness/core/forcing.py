"""Teacher forcing: one model read over a given token sequence in a few batched passes.

Used where a known answer is scored token by token instead of decoded: the oracle's replay from
recorded answers (`harness.evaluation.replay`), calibration along small's own answers and the
token labels of the trained routers (`harness.training`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from harness.core.backend import Backend

FORCED_CHUNK = 64  # positions per teacher-forcing forward pass (bounds the logits held at once)


def forced_passes(
    model: Backend,
    prompt: list[int],
    traj: list[int],
    chunk: int = FORCED_CHUNK,
    hidden: bool = False,
) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """Teacher forcing of one model over prompt + traj, `chunk` positions a pass (bounding the
    [chunk, V] logits held at once): yields (logits, hidden or None) whose rows predict traj[0],
    traj[1], ... in order. The model's cache is cleared before and after."""
    model.reset()
    try:
        if len(prompt) > 1:
            model.forward(prompt[:-1], 1)  # the prompt's cache; its outputs are not needed
        seq = prompt[-1:] + traj[:-1]  # the positions whose outputs predict traj[0..m-1]
        for s in range(0, len(seq), chunk):
            piece = seq[s : s + chunk]
            yield model.forward(piece, len(piece), hidden=hidden)
    finally:
        model.reset()
