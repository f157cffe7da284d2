"""Reads and writes safetensors files with numpy, BF16 included.

The `safetensors` package's numpy API has no BF16 (numpy has no such dtype), and BF16 is
what the checkpoints under test hold, so this keeps BF16 tensors as raw uint16 bits. The
format: an 8-byte little-endian header length, a JSON header of
{name: {dtype, shape, data_offsets}}, then the tensors' bytes.
"""
import json
import struct
from pathlib import Path

import numpy as np

# safetensors dtype -> numpy storage dtype (BF16 stays as its uint16 bits)
_NUMPY = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}


def read_tensors(path):
    """{name: (dtype string, numpy array of the stored bits, memory-mapped)}."""
    path = Path(path)
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    base = 8 + length
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in _NUMPY:
            raise ValueError(f"{path}: tensor {name} has dtype {dtype}; only BF16, F16 and F32 are read")
        begin, end = info["data_offsets"]
        count = (end - begin) // np.dtype(_NUMPY[dtype]).itemsize
        array = np.memmap(path, dtype=_NUMPY[dtype], mode="r", offset=base + begin, shape=(count,))
        out[name] = (dtype, array.reshape(info["shape"]))
    return out


def read_checkpoint(model_dir):
    """Every tensor of a checkpoint directory: one model.safetensors or the shards named
    by model.safetensors.index.json."""
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    tensors = {}
    for shard in shards:
        tensors.update(read_tensors(model_dir / shard))
    return tensors


def write_tensors(path, tensors):
    """tensors: {name: (dtype string, numpy array holding that dtype's bits)}, written in
    name order."""
    header, offset = {}, 0
    for name in sorted(tensors):
        dtype, array = tensors[name]
        if np.dtype(_NUMPY[dtype]) != array.dtype:
            raise ValueError(f"tensor {name}: {dtype} needs numpy {np.dtype(_NUMPY[dtype])}, got {array.dtype}")
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in sorted(tensors):
            np.ascontiguousarray(tensors[name][1]).tofile(f)


def bf16_to_f32(bits):
    """BF16 bits (uint16) -> float32, exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """float32 -> BF16 bits, rounded to nearest even (NaN not expected here)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
