"""Converts a Qwen3 checkpoint directory (config.json, safetensors, tokenizer.json) to a
GGUF file llama.cpp loads, with the `gguf` package from PyPI.

No weight changes value: matrices are written in the checkpoint's BF16 (or widened
exactly to F32 with --outtype f32); 1-D tensors (norms) are F32, as llama.cpp's own
converter writes them. Tensor names come from gguf's own name map. The vocabulary is the
checkpoint's byte-level BPE (tokens, merges, special tokens) with Qwen2's pre-tokenizer,
which is the regex the demo tokenizer uses; the benchmark feeds token ids, so the
tokenizer only has to load.

llama.cpp's convert_hf_to_gguf.py needs torch and transformers, which this machine does
not have; this writes the same keys for the one architecture the benchmark uses.
"""
import argparse
import json
from pathlib import Path

import gguf
import numpy as np

from safetensors_io import bf16_to_f32, read_checkpoint


def _rope_theta(config):
    if "rope_theta" in config:
        return float(config["rope_theta"])
    return float(config.get("rope_parameters", {}).get("rope_theta", 10000.0))


def _add_vocab(writer, model_dir, vocab_size):
    tok = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    model = tok["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"{model_dir}/tokenizer.json: only byte-level BPE tokenizers are converted")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [gguf.TokenType.UNUSED] * vocab_size
    for text, i in model["vocab"].items():
        tokens[i], types[i] = text, gguf.TokenType.NORMAL
    for added in tok.get("added_tokens", []):
        i = added["id"]
        tokens[i] = added["content"]
        types[i] = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    config = json.loads((Path(model_dir) / "config.json").read_text())
    eos = config.get("eos_token_id", 0)
    writer.add_eos_token_id(eos if isinstance(eos, int) else eos[0])
    if config.get("bos_token_id") is not None:
        writer.add_bos_token_id(config["bos_token_id"])
    writer.add_add_bos_token(False)


def convert(model_dir, out_path, outtype="bf16"):
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "qwen3":
        raise ValueError(f"{model_dir}: model_type {config.get('model_type')!r}; this converter writes qwen3 only")
    layers = config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim", config["hidden_size"] // heads)
    writer = gguf.GGUFWriter(str(out_path), "qwen3")
    writer.add_name(model_dir.name)
    writer.add_block_count(layers)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads", heads))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if outtype == "bf16" else gguf.LlamaFileType.ALL_F32)
    _add_vocab(writer, model_dir, config["vocab_size"])

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, layers)
    for name, (dtype, data) in read_checkpoint(model_dir).items():
        if name == "lm_head.weight" and config.get("tie_word_embeddings"):
            continue  # llama.cpp reads the tied head from token_embd
        new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise ValueError(f"{model_dir}: tensor {name} has no GGUF name for qwen3")
        if dtype == "BF16" and data.ndim == 2 and outtype == "bf16":
            writer.add_tensor(new_name, np.asarray(data), raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            values = bf16_to_f32(np.asarray(data)) if dtype == "BF16" else np.asarray(data, dtype=np.float32)
            writer.add_tensor(new_name, values.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("out")
    p.add_argument("--outtype", choices=["bf16", "f32"], default="bf16")
    a = p.parse_args()
    convert(a.model_dir, a.out, a.outtype)


if __name__ == "__main__":
    main()
