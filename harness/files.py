"""Reading the files a user names: checkpoints and their digests, each failure one `UserError` line.

Every file argument (a router checkpoint, a reward model, a calibration) is read here or through
these helpers, so a missing file, a file of another kind or a damaged one says what was wrong and
what to do instead of ending in a traceback.
"""

from __future__ import annotations

import hashlib
import pickle
import zipfile
from pathlib import Path

import torch

from harness.errors import UserError

REWARD_FORMAT = "hybridbench-reward/1"  # tag of reward-model checkpoints (`train-reward`)


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in 16 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def load_torch_file(path: str | Path, what: str, made_by: str) -> object:
    """`torch.load` of a user-named file (tensors and plain containers only, no pickled code);
    a missing, unreadable or foreign file is one UserError naming `what` and `made_by`."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path} (made by {made_by})")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile,
            pickle.UnpicklingError) as e:  # fmt: skip
        reason = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        raise UserError(
            f"{path} is not a {what} ({type(e).__name__}: {reason}); give a file made by {made_by}"
        ) from None


def read_reward_checkpoint(path: str | Path) -> dict:
    """A reward model's checkpoint dict (`harness.backends.reward_model.save_checkpoint`)."""
    ck = load_torch_file(path, "reward checkpoint", "hybridbench train-reward")
    if not isinstance(ck, dict) or ck.get("format") != REWARD_FORMAT:
        raise UserError(
            f"{path} is not a reward checkpoint ({REWARD_FORMAT}); give a file made by "
            "hybridbench train-reward"
        )
    return ck


def read_router_checkpoint(path: str | Path, kind: str) -> dict:
    """A trained router's checkpoint (`train-citer`, `train-query`) of the given `kind`."""
    ck = load_torch_file(path, f"{kind} router checkpoint", f"hybridbench train-{kind}")
    if not isinstance(ck, dict) or ck.get("kind") != kind:
        got = ck.get("kind") if isinstance(ck, dict) else type(ck).__name__
        raise UserError(
            f"{path} is a {got!r} checkpoint, not {kind!r}; give a file made by "
            f"hybridbench train-{kind}"
        )
    return ck
