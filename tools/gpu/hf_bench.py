#!/usr/bin/env python3
"""Hugging Face transformers baseline for the demo pair (issue 6), on the GPU machine.

Loads models/demo-target and models/demo-draft from their local directories (no
network), and for the public golden prompts (tests/data/golden-public.json, prompt_ids)
times greedy generation of 96 new tokens at batch 1: plain `generate`, plain with the
static cache (`cache_implementation="static"`, which makes transformers compile the decode
step with torch.compile: the way its docs tell users to make generation fast; mode
"static"), and assisted generation (`assistant_model=` the draft), in bfloat16 and float32,
median of --repeat sweeps over all prompts (after warm-up generations: one, or with the
static cache one per distinct prompt length, so no sweep pays a compilation). Each sweep is
wall clock over whole `generate` calls, prefill included: the way `specpipe bench` times its
e2e tok/s (request in to last token out). EOS does not stop generation
(the golden data continues through it). Checks the greedy tokens against
target_greedy_96 (the reference was made in float32: fp32 runs should match it exactly,
bf16 runs are reported). Prints one JSON object (and writes it to --out after every
configuration, so a timeout still leaves the finished ones).
"""
import argparse
import copy
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="models/demo-target")
    ap.add_argument("--draft", default="models/demo-draft")
    ap.add_argument("--golden", default="tests/data/golden-public.json")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--budget-s", type=float, default=240.0, help="stop starting new sweeps after this")
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="", help="comma list of run keys (plain_bfloat16, static_bfloat16, assisted_float32, ...)")
    ap.add_argument("--modes", default="plain,static,assisted")
    ap.add_argument("--cases", type=int, default=0, help="first N golden cases only (0: all)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    # Each prompt length may compile its own graph; past the default limit (8) torch.compile
    # silently falls back to eager, which would time the static mode as eager.
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)

    started = time.time()
    golden = json.load(open(args.golden))
    cases = golden["cases"][: args.cases or None]
    dev = args.device
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    report = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0) if dev.startswith("cuda") else dev,
        "cases": len(cases),
        "new_tokens": 96,
        "runs": {},
    }

    def dump():
        text = json.dumps(report, indent=1)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        return text

    def load(path, dtype):
        try:
            m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
        except TypeError:
            m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, local_files_only=True)
        return m.to(dev).eval()

    for dname in [d for d in args.dtypes.split(",") if d]:
        if args.only and not any(k.endswith("_" + dname) for k in args.only.split(",")):
            continue
        dtype = getattr(torch, dname)
        target = load(args.target, dtype)
        draft = load(args.draft, dtype)
        gc = copy.deepcopy(target.generation_config)
        gc.eos_token_id = None  # generate all 96 tokens
        gc.pad_token_id = 0
        gc.do_sample = False
        gc.max_new_tokens = 96
        gc.min_new_tokens = None
        for attr in ("temperature", "top_p", "top_k"):
            if hasattr(gc, attr):
                setattr(gc, attr, None)
        for mode in [m for m in args.modes.split(",") if m]:
            key = f"{mode}_{dname}"
            if args.only and key not in args.only.split(","):
                continue
            mgc = copy.deepcopy(gc)
            if mode == "static":
                mgc.cache_implementation = "static"
            kwargs = {"generation_config": mgc}
            if mode == "assisted":
                kwargs["assistant_model"] = draft
            inputs = [torch.tensor([c["prompt_ids"]], device=dev) for c in cases]

            def run_one(ids):
                with torch.inference_mode():
                    out = target.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
                return out[0, ids.shape[1]:].tolist()

            try:
                # Warm-up. The static cache is sized by the first call and reused by later
                # ones no longer than it, so the longest prompt goes first; then one call per
                # length, so a recompilation for a shape falls here, not in a sweep.
                if mode == "static":
                    warm = sorted({ids.shape[1]: ids for ids in inputs}.values(), key=lambda t: -t.shape[1])
                else:
                    warm = [inputs[0]]
                t0 = time.perf_counter()
                for ids in warm:
                    run_one(ids)
                sync()
                warmup_s = time.perf_counter() - t0
                sweeps, tokens = [], None
                for _ in range(args.repeat):
                    if sweeps and time.time() - started > args.budget_s:
                        break
                    got = []
                    t0 = time.perf_counter()
                    for ids in inputs:
                        got.append(run_one(ids))
                    sync()
                    sweeps.append(time.perf_counter() - t0)
                    tokens = got
                identical, first_div = 0, []
                for i, c in enumerate(cases):
                    want = c["target_greedy_96"]
                    if tokens[i] == want:
                        identical += 1
                    else:
                        p = next((j for j in range(min(len(want), len(tokens[i]))) if want[j] != tokens[i][j]),
                                 min(len(want), len(tokens[i])))
                        first_div.append({"case": i, "position": p})
                total_tokens = sum(len(t) for t in tokens)
                med = statistics.median(sweeps)
                entry = {
                    "tok_s": total_tokens / med,
                    "sweep_s": sweeps,
                    "warmup_s": warmup_s,
                    "tokens_generated": total_tokens,
                    "greedy_identical_to_reference": identical,
                    "divergences": first_div,
                }
                if mode == "static":  # proof that the decode step was compiled, not eager
                    from torch._dynamo.utils import counters
                    entry["compiled_graphs"] = counters["stats"]["unique_graphs"]
                if mode == "assisted":
                    agc = draft.generation_config
                    entry["assistant"] = {
                        "num_assistant_tokens": getattr(agc, "num_assistant_tokens", None),
                        "schedule": getattr(agc, "num_assistant_tokens_schedule", None),
                        "confidence_threshold": getattr(agc, "assistant_confidence_threshold", None),
                    }
                report["runs"][key] = entry
            except Exception as e:  # report and go on with the next configuration
                report["runs"][key] = {"error": f"{type(e).__name__}: {e}"}
            dump()
        del target, draft
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()
    report["elapsed_s"] = time.time() - started
    print(dump())


if __name__ == "__main__":
    sys.exit(main())
