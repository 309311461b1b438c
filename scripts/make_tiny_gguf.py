"""Write a transformers Qwen2 causal LM (and its tokenizer) as a GGUF file llama.cpp can serve.

    python scripts/make_tiny_gguf.py /tmp/tiny-large.gguf     # tests/tiny.py's large model

Tests use it to serve the tiny random large model of `tests/tiny.py` with llama.cpp's server, so
that a remote large model can be checked against a local small model that shares its vocabulary.
Tensor names come from the `gguf` package's own HF -> GGUF name map (the one llama.cpp's
converter uses); Qwen2 uses NeoX-style rotary embeddings in both libraries, so q/k are not
permuted. Weights are written as float32.

Tokenizer metadata: llama.cpp's BPE ("gpt2") vocabulary stores tokens in GPT-2's byte-to-unicode
form (" " is "Ġ"), so each character token is written in that form and detokenizes to the
same text as the HF tokenizer. Token ids past the tokenizer's length (the model's vocabulary is
padded) become unused "[PADn]" tokens. The hybrid core sends and reads token ids only, so the
server never has to tokenize text; one placeholder merge keeps llama.cpp's BPE loader happy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np

CONTROL, NORMAL, UNUSED = (
    gguf.TokenType.CONTROL,
    gguf.TokenType.NORMAL,
    gguf.TokenType.UNUSED,
)


def _rope_theta(config) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    return float(params.get("rope_theta") or getattr(config, "rope_theta", 10000.0))


def _vocab(tokenizer, n_vocab: int) -> tuple[list[str], list[int]]:
    """Token strings in GPT-2 byte-level form and their types, padded to the model's rows."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_char = bytes_to_unicode()
    special = set(tokenizer.all_special_tokens)
    by_id = {i: t for t, i in tokenizer.get_vocab().items()}
    tokens, types = [], []
    for i in range(n_vocab):
        tok = by_id.get(i)
        if tok is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
        elif tok in special:
            tokens.append(tok)
            types.append(CONTROL)
        else:
            tokens.append("".join(byte_char[b] for b in tok.encode("utf-8")))
            types.append(NORMAL)
    return tokens, types


def write_qwen2_gguf(model, tokenizer, path: str | Path, name: str = "tiny-qwen2") -> Path:
    """Write `model` (a Qwen2ForCausalLM) and `tokenizer` to `path` as an F32 GGUF file."""
    path, c = Path(path), model.config
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name(name)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(_rope_theta(c))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    tokens, types = _vocab(tokenizer, c.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["a b"])
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_pad_token_id(tokenizer.pad_token_id)
    w.add_add_bos_token(False)
    if tokenizer.chat_template:
        w.add_chat_template(tokenizer.chat_template)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, c.num_hidden_layers)
    for hf_name, tensor in model.state_dict().items():
        gg_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gg_name is None:
            raise ValueError(f"no GGUF name for tensor {hf_name}")
        w.add_tensor(gg_name, tensor.detach().float().numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):  # (--help is not a file name to write)
        print("usage: python scripts/make_tiny_gguf.py OUT.gguf", file=sys.stderr)
        return 0 if argv in (["-h"], ["--help"]) else 2
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.tiny import tiny_pair, tiny_tokenizer

    _, large = tiny_pair()
    out = write_qwen2_gguf(large, tiny_tokenizer(), argv[0])
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
