#!/usr/bin/env python3
"""Hugging Face's RoPE frequencies and scaling, as reference data for specpipe's tests.

Runs wherever `transformers` and `torch` are installed (the GPU machine has both; the
CI machine has neither, so the output is committed: tests/data/rope-scaling-hf.json).
For each case below (config.json's RoPE keys as HF checkpoints write them), it asks
transformers' own initialisers (ROPE_INIT_FUNCTIONS) for inv_freq and the attention
factor, and its rotary embedding module for cos / sin at a few positions, all on the
CPU in float32. tests/kernels/rope_scaling_test.cpp reads the file and compares
kernels/cpu/rope.cpp with it.

It also runs the demo target (models/demo-target, a trained Qwen3, in float32, eager
attention) with each scaling in MODEL_VARIANTS over SEQUENCE_LENGTH fixed token ids and
keeps the last position's logits: tests/model/rope_scaling_golden_test.cpp runs the same
through specpipe's forward (CPU, and the GPU where SPECPIPE_TEST_DEVICE names one).

Usage: python3 tools/gpu/hf_rope_reference.py OUT.json
"""
import json
import sys

POSITIONS = [0, 1, 7, 4095, 8191, 32767, 131071]

# (name, config dict). Shapes of real checkpoints; the RoPE keys as HF writes them.
CASES = [
    ("default_qwen3", dict(model_type="qwen3", hidden_size=1024, num_attention_heads=16, head_dim=128,
                           num_key_value_heads=8, max_position_embeddings=40960, rope_theta=1000000.0,
                           rope_scaling=None)),
    ("llama3_8b", dict(model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                       max_position_embeddings=131072, rope_theta=500000.0,
                       rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                         original_max_position_embeddings=8192))),
    ("llama3_1b", dict(model_type="llama", hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
                       max_position_embeddings=131072, rope_theta=500000.0,
                       rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                         original_max_position_embeddings=8192))),
    ("linear_4", dict(model_type="llama", hidden_size=2048, num_attention_heads=16, num_key_value_heads=16,
                      max_position_embeddings=16384, rope_theta=10000.0,
                      rope_scaling=dict(type="linear", factor=4.0))),
    ("yarn_qwen3", dict(model_type="qwen3", hidden_size=2560, num_attention_heads=32, head_dim=128,
                        num_key_value_heads=8, max_position_embeddings=131072, rope_theta=1000000.0,
                        rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32768))),
    # Qwen3's own advice (factor 4 over 32,768) on its 40,960-position config: the factor and
    # max_position_embeddings / original disagree; which one HF uses shows here.
    ("yarn_qwen3_40960", dict(model_type="qwen3", hidden_size=2560, num_attention_heads=32, head_dim=128,
                              num_key_value_heads=8, max_position_embeddings=40960, rope_theta=1000000.0,
                              rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32768))),
    ("yarn_beta", dict(model_type="qwen2", hidden_size=1024, num_attention_heads=16, num_key_value_heads=2,
                       max_position_embeddings=65536, rope_theta=10000.0,
                       rope_scaling=dict(rope_type="yarn", factor=8.0, original_max_position_embeddings=8192,
                                         beta_fast=16.0, beta_slow=2.0))),
    ("yarn_attention_factor", dict(model_type="qwen2", hidden_size=1024, num_attention_heads=16,
                                   num_key_value_heads=2, max_position_embeddings=65536, rope_theta=10000.0,
                                   rope_scaling=dict(rope_type="yarn", factor=2.0, attention_factor=1.5,
                                                     original_max_position_embeddings=32768))),
    ("yarn_mscale", dict(model_type="qwen2", hidden_size=1024, num_attention_heads=16, num_key_value_heads=2,
                         max_position_embeddings=65536, rope_theta=10000.0,
                         rope_scaling=dict(rope_type="yarn", factor=16.0, mscale=1.0, mscale_all_dim=0.5,
                                           original_max_position_embeddings=4096))),
]

# The demo target (head_dim 64, theta 100,000, 8,192 positions; trained, so its logits
# depend on the positions, unlike a random model's) with short "original" contexts, so
# that a 400-token sequence reaches the scaled frequencies.
MODEL_DIR = "models/demo-target"
SEQUENCE_LENGTH = 400
LOGITS_KEPT = 1024
MODEL_VARIANTS = [
    ("default", dict(rope_type="default")),
    ("linear", dict(rope_type="linear", factor=4.0)),
    ("llama3", dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=64)),
    ("yarn", dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=2048)),
]


def sequence_ids(vocab):
    return [(37 * i + 11) % vocab for i in range(SEQUENCE_LENGTH)]


def model_logits(torch):
    from transformers import AutoConfig, AutoModelForCausalLM
    runs = []
    for name, rope in MODEL_VARIANTS:
        base = AutoConfig.from_pretrained(MODEL_DIR)
        theta = (getattr(base, "rope_parameters", None) or {}).get("rope_theta", getattr(base, "rope_theta", 10000.0))
        try:  # transformers >= 5
            config = AutoConfig.from_pretrained(MODEL_DIR, rope_parameters=dict(rope_theta=theta, **rope))
        except TypeError:
            config = AutoConfig.from_pretrained(MODEL_DIR, rope_scaling=None if name == "default" else rope)
        model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, config=config, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        ids = sequence_ids(config.vocab_size)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].to(torch.float32)
        # The first LOGITS_KEPT logits (enough to compare; the file stays small) and the argmax.
        runs.append({"name": name, "rope": rope, "argmax": int(logits.argmax()),
                     "last_logits": [float("%.7g" % v) for v in logits[:LOGITS_KEPT].tolist()]})
    return {"model": MODEL_DIR, "sequence_length": SEQUENCE_LENGTH, "ids": "(37 * i + 11) % vocab_size",
            "runs": runs}


def main():
    import torch
    import transformers
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    out = {"transformers": transformers.__version__, "torch": torch.__version__, "positions": POSITIONS,
           "cases": []}
    for name, fields in CASES:
        model_type = fields["model_type"]
        config = AutoConfig.for_model(**fields)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        scaling = getattr(config, "rope_scaling", None) or {}
        params = getattr(config, "rope_parameters", None) or {}
        rope_type = (params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default")
        if rope_type in ROPE_INIT_FUNCTIONS:
            inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
        else:  # transformers 5 computes the default in each model class, with this formula
            base = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
            inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float) / head_dim))
            attention_factor = 1.0
        inv_freq = inv_freq.to(torch.float32)
        pos = torch.tensor(POSITIONS, dtype=torch.float32)
        # What the rotary module does: angles in float32, then cos / sin times the factor.
        angles = pos[:, None] * inv_freq[None, :]
        cos = angles.cos() * attention_factor
        sin = angles.sin() * attention_factor
        out["cases"].append({
            "name": name,
            "config": fields,
            "head_dim": head_dim,
            "rope_type": rope_type,
            "attention_factor": float(attention_factor),
            "inv_freq": inv_freq.tolist(),
            "cos": cos.tolist(),
            "sin": sin.tolist(),
        })
    out["model_runs"] = model_logits(torch)
    text = json.dumps(out)
    if len(sys.argv) > 1:
        open(sys.argv[1], "w").write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
