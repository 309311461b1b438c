"""Tests for harness/backends/models.py on tiny random models and fake weight packages (CPU, seconds)."""

from __future__ import annotations

import hashlib
import sys
import types

import pytest
import torch
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from harness.backends import models
from harness.errors import UserError

CHARS = "abcdefghijklmnopqrstuvwxyz .,!?0123456789"


@pytest.fixture(autouse=True)
def offline_cache(tmp_path, monkeypatch):
    """No hub, and a private cache per test so nothing leaks into ~/.cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HYBRIDBENCH_CACHE", str(tmp_path / "cache"))


def tiny_tokenizer(eos: str = "<eos>", extra: str = "") -> PreTrainedTokenizerFast:
    """A character-level tokenizer: one token per character, three specials first."""
    vocab = {t: i for i, t in enumerate(["<unk>", "<eos>", "<pad>", *CHARS, *extra])}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, pad_token="<pad>", unk_token="<unk>"
    )


def tiny_config(tie: bool) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=tie,
    )


def save_tiny_model(path, tie: bool = False):
    torch.manual_seed(0)
    Qwen2ForCausalLM(tiny_config(tie)).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


# --- loading a local folder -----------------------------------------------------------------


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_load_model_from_folder(tmp_path, tie, dtype):
    folder = save_tiny_model(tmp_path / "tiny", tie=tie)
    loaded = models.load_model(str(folder), role="large", dtype=dtype)

    # Hand count for the config above (hidden 32, mlp 64, 2 layers, 4 heads, 2 kv heads, head 8).
    q = 32 * 32 + 32  # q_proj with bias
    kv = 2 * (32 * 16 + 16)  # k_proj and v_proj with bias (2 kv heads x head_dim 8 = 16)
    o = 32 * 32  # o_proj, no bias
    mlp = 3 * 32 * 64  # gate, up, down
    norms = 2 * 32
    layer = q + kv + o + mlp + norms
    embed = 300 * 32
    n_params = 2 * layer + embed + 32 + (0 if tie else embed)  # final norm; untied lm_head
    size = 4 if dtype == "float32" else 2

    assert loaded.model.dtype == getattr(torch, dtype)
    assert not loaded.model.training
    info = loaded.info
    assert (info.name, info.source, info.device, info.dtype) == ("large", str(folder), "cpu", dtype)
    assert info.n_params == n_params
    assert info.weight_bytes == n_params * size
    assert info.kv_bytes_per_token == 2 * 2 * 2 * 8 * size  # K+V, layers, kv heads, head dim
    assert info.sha256 == ""
    assert loaded.tokenizer("abc").input_ids == [3, 4, 5]


def test_load_model_keeps_rotary_table_in_float32(tmp_path):
    """Loading with dtype= (not .to()) leaves the rotary inv_freq buffer in full precision."""
    loaded = models.load_model(str(save_tiny_model(tmp_path / "tiny")), dtype="bfloat16")
    inv_freq = [b for n, b in loaded.model.named_buffers() if n.endswith("inv_freq")]
    assert inv_freq and all(b.dtype == torch.float32 for b in inv_freq)


def test_auto_device_puts_only_large_on_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert models.pick_device("auto", "large") == "cuda"
    assert models.pick_device("auto", "small") == "cpu"
    assert models.pick_device("cpu", "large") == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_large_loads_on_gpu(tmp_path):
    loaded = models.load_model(str(save_tiny_model(tmp_path / "tiny")), role="large")
    assert loaded.info.device == "cuda:0" and loaded.model.device.type == "cuda"


def test_load_tokenizer(tmp_path):
    folder = save_tiny_model(tmp_path / "tiny")
    assert models.load_tokenizer(str(folder)).eos_token_id == 1


# --- resolving sources ----------------------------------------------------------------------


@pytest.mark.parametrize("source", ["/no/such/model", "./missing", "a/b/c", "x.gguf"])
def test_missing_path_is_user_error(source):
    with pytest.raises(UserError, match="model path not found"):
        models.resolve_source(source)


def test_unknown_name_offline_lists_packaged_models():
    with pytest.raises(UserError, match="qwen2.5-coder-0.5b-instruct"):
        models.resolve_source("Qwen/Qwen2.5-7B")


def test_hub_id_passes_through_when_online(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert models.resolve_source("Qwen/Qwen2.5-7B") == ("Qwen/Qwen2.5-7B", "")


def test_bad_dtype_is_user_error(tmp_path):
    with pytest.raises(UserError, match="dtype"):
        models.load_model(str(save_tiny_model(tmp_path / "tiny")), dtype="int3")


# --- tokenizer compatibility ----------------------------------------------------------------


def test_same_tokenizer_passes():
    models.check_same_tokenizer(tiny_tokenizer(), tiny_tokenizer())


@pytest.mark.parametrize(
    "other, what",
    [
        (lambda: tiny_tokenizer(extra="XYZ"), "vocab"),
        (lambda: tiny_tokenizer(eos="<pad>"), "eos_token_id"),
    ],
)
def test_different_tokenizer_is_user_error(other, what):
    with pytest.raises(UserError, match=f"small and large tokenizers differ: .*{what}"):
        models.check_same_tokenizer(tiny_tokenizer(), other())


# --- assembling packaged GGUFs from fake part packages --------------------------------------


def tiny_gguf_bytes(tmp_path) -> bytes:
    """A valid GGUF header with one tensor: enough for the metadata check."""
    import gguf
    import numpy as np

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("Tiny Test")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def fake_packaged(tmp_path, monkeypatch, data: bytes, n_parts: int = 11, sha: str = "") -> str:
    """Split `data` into n_parts fake modules `hbfakepart{i}` and register a PACKAGED entry."""
    step = -(-len(data) // n_parts)
    for i in range(1, n_parts + 1):
        part = tmp_path / f"part{i:02d}.bin"
        part.write_bytes(data[(i - 1) * step : i * step])
        module = types.ModuleType(f"hbfakepart{i}")
        module.get_part_path = lambda part=part: str(part)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    entry = {
        "parts": "hbfakepart",
        "n_parts": n_parts,
        "sha256": sha or hashlib.sha256(data).hexdigest(),
        "architecture": "qwen2",
    }
    monkeypatch.setitem(models.PACKAGED, "fake-model", entry)
    return "fake-model"


def test_assemble_joins_parts_in_numeric_order(tmp_path, monkeypatch):
    data = tiny_gguf_bytes(tmp_path)
    name = fake_packaged(tmp_path, monkeypatch, data)  # 11 parts: text order would be 1, 10, 11, 2
    path = models.assemble_gguf(name)
    assert path == models.cache_dir() / "gguf" / "fake-model.gguf"
    assert path.read_bytes() == data
    assert models.gguf_metadata(path) == {
        "name": "Tiny Test",
        "architecture": "qwen2",
        "n_tensors": 1,
    }


def test_assemble_skips_work_when_cached(tmp_path, monkeypatch):
    name = fake_packaged(tmp_path, monkeypatch, tiny_gguf_bytes(tmp_path))
    first = models.assemble_gguf(name)

    def boom(*args):
        raise AssertionError("should not re-join or re-hash")

    monkeypatch.setattr(models, "part_paths", boom)
    monkeypatch.setattr(models, "_hash_file", boom)
    assert models.assemble_gguf(name) == first


def test_assemble_sha_mismatch_is_user_error(tmp_path, monkeypatch):
    name = fake_packaged(tmp_path, monkeypatch, tiny_gguf_bytes(tmp_path), sha="0" * 64)
    with pytest.raises(UserError, match="sha256"):
        models.assemble_gguf(name)
    assert not list((models.cache_dir() / "gguf").iterdir())  # no half file left behind


def test_assemble_wrong_architecture_is_user_error(tmp_path, monkeypatch):
    name = fake_packaged(tmp_path, monkeypatch, tiny_gguf_bytes(tmp_path))
    monkeypatch.setitem(models.PACKAGED[name], "architecture", "llama")
    with pytest.raises(UserError, match="metadata"):
        models.assemble_gguf(name)


def test_missing_weight_package_names_the_extra(monkeypatch):
    entry = {"parts": "hb_no_such_part", "n_parts": 2, "sha256": "0" * 64}
    monkeypatch.setitem(models.PACKAGED, "absent-model", entry)
    with pytest.raises(UserError, match=r"hybridbench\[models\]"):
        models.assemble_gguf("absent-model")


def test_unknown_packaged_name_lists_valid_ones():
    with pytest.raises(UserError, match="qwen2.5-coder-1.5b-instruct"):
        models.assemble_gguf("no-such-model")


# --- dense conversion: once, atomically ------------------------------------------------------


def test_dense_dir_converts_once_and_atomically(tmp_path, monkeypatch):
    name = fake_packaged(tmp_path, monkeypatch, tiny_gguf_bytes(tmp_path))
    calls = []

    def crashing_convert(gguf, out, dtype, meta):
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")  # half-written, then the process dies
        raise RuntimeError("killed")

    monkeypatch.setattr(models, "_convert", crashing_convert)
    with pytest.raises(RuntimeError):
        models.dense_dir(name)
    assert not (models.cache_dir() / "dense" / f"{name}-bfloat16").exists()

    def fake_convert(gguf, out, dtype, meta):
        calls.append(dtype)
        save_tiny_model(out)
        models._write_record(out, meta)

    monkeypatch.setattr(models, "_convert", fake_convert)
    folder = models.dense_dir(name)
    assert models.dense_dir(name) == folder and calls == ["bfloat16"]
    monkeypatch.setattr(models, "assemble_gguf", None)  # a built folder needs no GGUF any more
    assert models.dense_dir(name) == folder
    record = models.source_record(folder)
    assert record["gguf_sha256"] == models.PACKAGED[name]["sha256"]
    assert record["name"] == "Tiny Test"
    loaded = models.load_model(name)
    assert loaded.info.sha256 == models.PACKAGED[name]["sha256"]
    assert loaded.info.source == name


# --- a real (tiny) GGUF through the whole path -----------------------------------------------

# transformers' GGUF loader names for Qwen2 weights (llama.cpp's convention).
GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    **{f"self_attn.{x}_proj.{p}": f"attn_{x}.{p}" for x in "qkv" for p in ("weight", "bias")},
}


def write_tiny_gguf(path, model: Qwen2ForCausalLM) -> None:
    """Write `model` as an f32 Qwen2 GGUF with a byte-level BPE tokenizer of 300 tokens."""
    import gguf

    cfg = model.config
    tokens = [chr(i) for i in range(33, 127)] + ["Ġ", "ab", "<|endoftext|>", "<|im_end|>"]
    n_normal = len(tokens) - 2
    tokens += [f"<extra{i}>" for i in range(cfg.vocab_size - len(tokens))]
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("Tiny Qwen2")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * n_normal + [3] * (len(tokens) - n_normal))
    w.add_token_merges(["a b"])
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    top = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    for name, tensor in model.state_dict().items():
        if name in top:
            name = top[name]
        else:
            i, rest = name.removeprefix("model.layers.").split(".", 1)
            name = f"blk.{i}.{GGUF_NAMES[rest]}"
        w.add_tensor(name, tensor.float().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_file_loads_through_dense_cache(tmp_path):
    torch.manual_seed(0)
    reference = Qwen2ForCausalLM(tiny_config(tie=False)).eval()
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, reference)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()

    loaded = models.load_model(str(path), dtype="float32")

    folder = models.cache_dir() / "dense" / f"tiny-{sha[:12]}-float32"
    assert models.source_record(folder)["gguf_sha256"] == sha
    assert models.source_record(folder)["name"] == "Tiny Qwen2"
    assert "quantization_config" not in (folder / "config.json").read_text()
    assert loaded.info.sha256 == sha and loaded.info.n_params == reference.num_parameters()
    ids = loaded.tokenizer("ab!", return_tensors="pt").input_ids
    assert ids.tolist() == [[95, 0]]  # the merge "a b" applied, "!" is the first byte token
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(ids).logits, reference(ids).logits)
    assert models.dense_dir(str(path), "float32") == folder  # second call: cached, no convert
