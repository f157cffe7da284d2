"""Writes a synthetic checkpoint: a real model's shape with seeded random BF16 weights and
the demo tokenizer, as config.json + model.safetensors + tokenizer files, so that
specpipe and llama.cpp (after gguf_convert.py) load the same weights. The CPU
counterpart of the GPU tools' --synthetic shapes (tools/gpu/synthetic_models.cpp).
"""
import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from safetensors_io import f32_to_bf16, write_tensors

# Qwen3-0.6B's config.json values, with the demo vocabulary (8,192 tokens) instead of
# 151,936, so the demo tokenizer and prompts apply.
PRESETS = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       max_position_embeddings=40960, tie_word_embeddings=True),
}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]


def write(preset, out_dir, tokenizer_dir, seed=0, std=0.02):
    shape = PRESETS[preset]
    tokenizer_dir, out_dir = Path(tokenizer_dir), Path(out_dir)
    vocab = json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"]
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    h, inter, hd = shape["hidden_size"], shape["intermediate_size"], shape["head_dim"]
    q, kv = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd

    def matrix(rows, cols):
        return "BF16", f32_to_bf16(rng.standard_normal((rows, cols), dtype=np.float32) * std)

    def ones(n):
        return "BF16", f32_to_bf16(np.ones(n, dtype=np.float32))

    tensors = {"model.embed_tokens.weight": matrix(vocab, h), "model.norm.weight": ones(h)}
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": ones(h), p + "post_attention_layernorm.weight": ones(h),
            p + "self_attn.q_proj.weight": matrix(q, h), p + "self_attn.k_proj.weight": matrix(kv, h),
            p + "self_attn.v_proj.weight": matrix(kv, h), p + "self_attn.o_proj.weight": matrix(h, q),
            p + "self_attn.q_norm.weight": ones(hd), p + "self_attn.k_norm.weight": ones(hd),
            p + "mlp.gate_proj.weight": matrix(inter, h), p + "mlp.up_proj.weight": matrix(inter, h),
            p + "mlp.down_proj.weight": matrix(h, inter),
        })
    write_tensors(out_dir / "model.safetensors", tensors)
    config = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "dtype": "bfloat16", "hidden_act": "silu",
        "attention_bias": False, "vocab_size": vocab, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0,
        **{k: v for k, v in shape.items() if k != "rope_theta"},
        "rope_parameters": {"rope_theta": shape["rope_theta"], "rope_type": "default"},
        "synthetic": {"preset": preset, "seed": seed, "std": std},
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, out_dir / name)
    return out_dir


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("preset", choices=sorted(PRESETS))
    p.add_argument("out_dir")
    p.add_argument("--tokenizer-from", default="models/demo-target", help="checkpoint whose tokenizer and vocabulary size are used")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    write(a.preset, a.out_dir, a.tokenizer_from, a.seed)


if __name__ == "__main__":
    main()
