#!/usr/bin/env python3
"""Seed corpora of the harnesses added after the model-file ones (scripts/fuzz.sh calls
this with HARNESS DIR ROOT): real inputs from the demo files, examples/, docs and tests,
small enough (<= 64 KiB) for libFuzzer to mutate."""
import glob
import json
import os
import re
import sys

harness, out, root = sys.argv[1], sys.argv[2], sys.argv[3]
count = 0


def put(data, name=None):
    global count
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    count += 1
    with open(os.path.join(out, name or f"seed-{count:04d}"), "wb") as f:
        f.write(data[:65536])


def texts():
    """Prompts and tokenizer test strings: code, prose, odd Unicode."""
    for case in json.load(open(f"{root}/tests/data/tokenizer-fuzz.json"))["cases"][:150]:
        yield case["text"]
    for name in ("golden-public.json", "golden-long.json"):
        for case in json.load(open(f"{root}/tests/data/{name}"))["cases"][:8]:
            yield case["prompt"][:4096]
    yield "<|endoftext|>Hello<|endoftext|> caf\u00e9 e\u0301 \uff21 \u4f60\u597d \U0001F600 \u0130i\u0307"


def demo_tokenizer():
    return json.load(open(f"{root}/models/demo-target/tokenizer.json"))


if harness == "tokenizer_text":
    for t in texts():
        put(t)
    put(b"\xff\xfe\xc3(\xe2\x82\xf0\x9f\x98")  # invalid UTF-8: refused
elif harness == "tokenizer_json":
    # The demo tokenizer cut to its 256 byte tokens plus the merges among the first
    # 600 tokens, and variants of each part the loader reads (README: what loads).
    t = demo_tokenizer()
    vocab = {k: v for k, v in t["model"]["vocab"].items() if v < 600}
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = [m for m in t["model"]["merges"]
                            if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab][:300]
    put(json.dumps(t), "demo-small.json")
    variants = [
        ("normalizer", None), ("normalizer", {"type": "NFKC"}),
        ("normalizer", {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "NFKD"}]}),
        ("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}),
        ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
        ("added_tokens", t["added_tokens"] + [
            {"id": 600, "content": "<s>", "single_word": False, "lstrip": True, "rstrip": True,
             "normalized": True, "special": False}]),
        ("post_processor", None),
    ]
    for i, (key, value) in enumerate(variants):
        v = json.loads(json.dumps(t))
        v[key] = value
        if key == "added_tokens":
            v["model"]["vocab"] = {k: i for k, i in vocab.items() if i < 600}
        put(json.dumps(v), f"variant-{i}.json")
    s = json.loads(json.dumps(t))
    s["model"]["merges"] = [" ".join(m) for m in s["model"]["merges"]]
    s["model"]["ignore_merges"] = True
    put(json.dumps(s), "string-merges.json")
elif harness == "pipeline_yaml":
    for f in sorted(glob.glob(f"{root}/examples/pipelines/*.yaml") + glob.glob(f"{root}/examples/plugins/*/*.yaml")):
        put(open(f, "rb").read(), os.path.basename(f))
    # The YAML documents written in the tests (raw strings of the config tests).
    src = open(f"{root}/tests/pipeline/pipeline_config_test.cpp").read()
    for doc in re.findall(r'R"\((.*?)\)"', src, re.S):
        if ":" in doc:
            put(doc)
elif harness == "protocol":
    for m in [
        {"v": 1, "id": "r1", "type": "generate", "prompt": "def add(a, b):", "max_tokens": 8, "stream": True},
        {"id": "r2", "type": "generate", "prompt_ids": [1, 2, 3], "temperature": 0.7, "top_k": 8, "top_p": 0.9,
         "seed": 3, "stop": ["\n\n"], "ignore_eos": True, "gamma": 4},
        {"v": 1, "id": "c1", "type": "cancel", "target": "r1"},
        {"v": 1, "id": "s1", "type": "stats"}, {"v": 1, "id": "h1", "type": "health"},
        {"v": 2, "id": "x", "type": "health"}, {"id": "x", "type": "dance"},
        {"id": "x", "type": "generate", "prompt": "a", "max_tokens": -1, "temperature": 1e308},
    ]:
        put(json.dumps(m))
    put('{"id": "\\u00e9\\ud83d\\ude00", "type": "generate", "prompt": "\\u0000<|endoftext|>"}')
    put("[1, 2, 3]")
    put('{"id": "n", "type": "generate", "prompt_ids": [18446744073709551615, 1e400]}')
elif harness == "http":
    def request(method, path, body=b"", headers=()):
        head = [f"{method} {path} HTTP/1.1", "Host: localhost"] + list(headers)
        if body or method == "POST":
            head.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body

    completion = json.dumps({"model": "demo-target", "prompt": "def add(a, b):", "max_tokens": 8,
                             "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}).encode()
    chat = json.dumps({"model": "demo-target", "messages": [{"role": "system", "content": "Be brief."},
                                                            {"role": "user", "content": "Hi"}],
                       "max_tokens": 4, "stop": ["\n"], "top_p": 0.5}).encode()
    put(request("POST", "/v1/completions", completion, ["Content-Type: application/json"]))
    put(request("POST", "/v1/chat/completions", chat, ["Expect: 100-continue"]))
    put(request("GET", "/health") + request("GET", "/v1/models") + request("GET", "/metrics?x=1"))
    put(request("POST", "/v1/completions", json.dumps({"prompt": [1, 2, 3], "n": 2, "seed": 1}).encode(),
                ["Connection: close"]))
    chunked = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked += b"%x\r\n%s\r\n0\r\n\r\n" % (len(completion), completion)
    put(chunked)
    put(b"POST /v1/completions HTTP/1.0\r\n\r\n" + completion)
else:
    sys.exit(f"seeds.py: no seeds for '{harness}'")
print(f"seeds.py: {count} seeds for {harness}", file=sys.stderr)
