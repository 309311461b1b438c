"""Reading the files a user names, each failure one `UserError` line: what was wrong, what to do.

Every file argument (a router checkpoint, a reward model, a calibration, a GGUF file, a model
folder) is checked or read here, so a missing file, a folder where a file belongs, a file of
another kind or a damaged one ends in one `error:` line instead of a traceback. The table of the
inputs tried and the line each gives: docs/bad-inputs.md (tests/test_bad_inputs.py).

    user_file(path, what, made_by) -> Path          exists, is a file, is readable
    read_json_file(path, what, made_by) -> object   ... and parses as JSON
    check_gguf(path) -> Path                        ... and starts with the GGUF magic
    check_model_folder(path) -> Path                a folder with a config.json naming its model
    load_torch_file / read_router_checkpoint / read_reward_checkpoint: torch checkpoints
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from harness.errors import UserError

REWARD_FORMAT = "hybridbench-reward/1"  # tag of reward-model checkpoints (`train-reward`)
REWARD_KEYS = ("backbone", "n_layers", "trained")  # what every reward checkpoint holds
# What each trained router's checkpoint must hold to be loaded (`train-citer`, `train-query`)
ROUTER_KEYS = {
    "citer": ("hidden_size", "state_dict", "train_ids", "calib_ids"),
    "query": ("hidden_size", "state_dict", "train_ids", "calib_ids"),
}
GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file
MODEL_HINT = "give a packaged model name, a model folder (save_pretrained) or a .gguf file"


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in 16 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def user_file(path: str | Path, what: str, made_by: str) -> Path:
    """`path` if it names a readable file; else one UserError naming `what` and `made_by`."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a {what}; give a file made by {made_by}")
    if not path.is_file():
        raise UserError(f"{what} not found: {path} (made by {made_by})")
    if not os.access(path, os.R_OK):
        raise UserError(f"{what} {path} is not readable (permissions); check who owns it")
    return path


def read_json_file(path: str | Path, what: str, made_by: str) -> object:
    """The JSON value in a user-named file (`user_file`'s checks, then one UserError if it does
    not parse)."""
    path = user_file(path, what, made_by)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(
            f"{path} is not a {what}: not JSON ({_first_line(e)}); give a file made by {made_by}"
        ) from None


def check_gguf(path: str | Path) -> Path:
    """`path` if it is a readable file that starts with the GGUF magic; else one UserError."""
    path = user_file(path, "GGUF file", "llama.cpp's convert_hf_to_gguf.py")
    with open(path, "rb") as f:
        head = f.read(len(GGUF_MAGIC))
    if head != GGUF_MAGIC:
        what = "it is empty" if not head else f"it starts with {head!r}, not {GGUF_MAGIC!r}"
        raise UserError(f"{path} is not a GGUF file ({what}); {MODEL_HINT}")
    return path


def check_model_folder(path: str | Path) -> Path:
    """`path` if it is a folder whose config.json names a model type (what transformers needs to
    load it); else one UserError."""
    path = Path(path).expanduser()
    config = path / "config.json"
    if not config.is_file():
        raise UserError(f"{path} is not a model folder: it has no config.json; {MODEL_HINT}")
    cfg = read_json_file(config, "model config", "save_pretrained")
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise UserError(f"{config} names no model_type, so no model can be built; {MODEL_HINT}")
    return path


def load_torch_file(path: str | Path, what: str, made_by: str) -> object:
    """`torch.load` of a user-named file (tensors and plain containers only, no pickled code);
    a missing, unreadable or foreign file is one UserError naming `what` and `made_by`."""
    import torch  # here, not at the top: the commands that only read files start without it

    path = user_file(path, what, made_by)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a foreign file fails in many ways (pickle, zip, ...)
        raise UserError(  # torch's own message is a page of advice about weights_only
            f"{path} is not a {what} (torch.load cannot read it: {type(e).__name__}); "
            f"give a file made by {made_by}"
        ) from None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:120] if text else type(e).__name__


def _check_keys(ck: dict, keys: tuple[str, ...], path: Path, what: str, made_by: str) -> None:
    missing = [k for k in keys if k not in ck]
    if missing:
        raise UserError(
            f"{path} is a damaged {what}: it lacks {', '.join(missing)}; "
            f"make it again with {made_by}"
        )


def read_reward_checkpoint(path: str | Path) -> dict:
    """A reward model's checkpoint dict (`harness.backends.reward_model.save_checkpoint`)."""
    made_by = "hybridbench train-reward"
    ck = load_torch_file(path, "reward checkpoint", made_by)
    if not isinstance(ck, dict) or ck.get("format") != REWARD_FORMAT:
        raise UserError(
            f"{path} is not a reward checkpoint ({REWARD_FORMAT}); give a file made by {made_by}"
        )
    _check_keys(ck, REWARD_KEYS, Path(path), "reward checkpoint", made_by)
    return ck


def read_router_checkpoint(path: str | Path, kind: str) -> dict:
    """A trained router's checkpoint (`train-citer`, `train-query`) of the given `kind`."""
    made_by = f"hybridbench train-{kind}"
    ck = load_torch_file(path, f"{kind} router checkpoint", made_by)
    if not isinstance(ck, dict) or "kind" not in ck:
        raise UserError(
            f"{path} is not a {kind} router checkpoint (it names no router kind); "
            f"give a file made by {made_by}"
        )
    if ck["kind"] != kind:
        raise UserError(
            f"{path} is a {ck['kind']!r} checkpoint, not {kind!r}; give a file made by {made_by}"
        )
    _check_keys(ck, ROUTER_KEYS.get(kind, ()), Path(path), f"{kind} router checkpoint", made_by)
    return ck
