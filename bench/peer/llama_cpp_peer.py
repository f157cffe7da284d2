"""Times llama.cpp (llama-cpp-python) and specpipe on the same checkpoint, prompts, token
counts and threads in one run, and checks that their greedy tokens are equal.

Rounds alternate between the engines (specpipe bench, then llama.cpp plain and prompt
lookup), so load from other processes on a shared machine falls on both alike; every
figure is the median over rounds. Decode tok/s counts the tokens after the first (the
first comes from the prompt's forward) over the time the engine spent producing them:
specpipe's time inside rounds (draft + verify + KV commit + messaging), llama.cpp's time
inside llama_decode (its own perf counters, reset after the first token). llama.cpp's
figure leaves out its sampler and the Python prompt-lookup drafter, so it is the
stronger of its two measures; its wall time from first to last token is reported too.

On a machine shared with other work, wall time measures the share of the cores each
engine was given. So every run also reports end-to-end tok/s by CPU time: tokens over
(process CPU time / threads) across whole requests, which approximates the rate the
engine would reach with its threads undisturbed (spin-waits and memory stalls count,
time spent descheduled does not; llama.cpp's includes the Python driver).
Run through bench/llama_cpp_peer.sh; docs/BENCHMARKS.md section 1 holds the results.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from gguf_convert import convert


def load_prompts(path, count, max_tokens):
    prompts = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            j = json.loads(line)
            prompts.append({"prompt_ids": j["prompt_ids"], "max_tokens": max_tokens or j.get("max_tokens", 96)})
    return prompts[:count] if count else prompts


class CountingLookup(LlamaPromptLookupDecoding):
    """llama.cpp's prompt-lookup drafter, counting its calls (one per verify round) and
    the tokens it proposed."""

    def __init__(self, max_ngram_size, num_pred_tokens):
        super().__init__(max_ngram_size=max_ngram_size, num_pred_tokens=num_pred_tokens)
        self.calls = self.proposed = 0

    def __call__(self, input_ids, /, **kwargs):
        drafts = super().__call__(input_ids, **kwargs)
        self.calls += 1
        self.proposed += len(drafts)
        return drafts


def llama_run(llm, prompts, threads):
    """One pass over the prompts, greedy. Returns outputs and times."""
    outputs, decode_ms, wall_decode_ms, e2e_ms = [], 0.0, 0.0, 0.0
    cpu_start = time.process_time()
    for p in prompts:
        llm.reset()  # no prefix reuse from the previous prompt: every request starts cold
        tokens = []
        start = time.perf_counter()
        first = None
        for token in llm.generate(p["prompt_ids"], temp=0.0, top_k=1, repeat_penalty=1.0):
            tokens.append(int(token))
            if first is None:
                first = time.perf_counter()
                llama_cpp.llama_perf_context_reset(llm.ctx)
            if len(tokens) == p["max_tokens"]:
                break
        end = time.perf_counter()
        perf = llama_cpp.llama_perf_context(llm.ctx)
        # n_eval / n_p_eval are clamped to >= 1 by llama.cpp; the times are exact
        decode_ms += perf.t_eval_ms + perf.t_p_eval_ms
        wall_decode_ms += (end - first) * 1e3
        e2e_ms += (end - start) * 1e3
        outputs.append(tokens)
    cpu_ms = (time.process_time() - cpu_start) * 1e3 / threads
    after_first = sum(len(t) - 1 for t in outputs)
    return {"cpu_e2e_tok_per_s": sum(len(t) for t in outputs) / cpu_ms * 1e3,"outputs": outputs, "decode_tok_per_s": after_first / decode_ms * 1e3,
            "wall_decode_tok_per_s": after_first / wall_decode_ms * 1e3,
            "e2e_tok_per_s": sum(len(t) for t in outputs) / e2e_ms * 1e3, "decode_ms": decode_ms}


def specpipe_run(args, prompts_file, gammas, out_json):
    cmd = [args.specpipe, "--threads", str(args.threads), "bench", "--model", str(args.model), "--prompts",
           str(prompts_file), "--repeat", "1", "--no-draft-model", "--gammas", ",".join(map(str, gammas)),
           "--json", str(out_json)]
    if not gammas:
        cmd.append("--no-ngram")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    doc = json.loads(Path(out_json).read_text())
    n_prompts = len(doc["plain_outputs"])
    generated = sum(len(t) for t in doc["plain_outputs"])  # every row's outputs equal plain's (checked below)
    rows = {}
    for r in doc["results"]:
        decode_ms = r["draft_ms"] + r["verify_ms"] + r["commit_ms"] + r["messaging_ms"] + r.get("queued_ms", 0)
        rows["plain" if r["gamma"] == 0 else f"ngram{r['gamma']}"] = {
            "decode_tok_per_s": (generated - n_prompts) / decode_ms * 1e3, "e2e_tok_per_s": r["e2e_tok_per_s"],
            "cpu_e2e_tok_per_s": generated / r["cpu_ms"] * 1e3,
            "tokens_per_step": r["tokens_per_target_step"], "identical_to_plain": r["identical_to_plain"]}
    return rows, doc["plain_outputs"]


def first_divergence(a_outputs, b_outputs):
    for i, (a, b) in enumerate(zip(a_outputs, b_outputs)):
        for pos, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return {"prompt": i, "position": pos, "specpipe": x, "llama_cpp": y}
        if len(a) != len(b):
            return {"prompt": i, "position": min(len(a), len(b)), "length_differs": True}
    return None


def logit_margin(llm, context, a, b):
    """llama.cpp's logit of token a minus token b after `context` (why greedy paths split)."""
    llm.reset()
    llm.eval(context)
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
    top2 = np.sort(logits)[-2:]
    return {"llama_cpp_logit_of_specpipe_token": float(logits[a]), "llama_cpp_logit_of_its_token": float(logits[b]),
            "llama_cpp_top2_gap": float(top2[1] - top2[0]), "logit_scale_std": float(logits.std())}


def explain(div, prompts, spec_outputs, models):
    """At the first divergence: the logit gap in each llama.cpp dtype, and which token
    each dtype picks there (given specpipe's path so far)."""
    if div is None or "length_differs" in div:
        return div
    context = prompts[div["prompt"]]["prompt_ids"] + spec_outputs[div["prompt"]][:div["position"]]
    for dtype, llm in models.items():
        m = logit_margin(llm, context, div["specpipe"], div["llama_cpp"])
        m["picks_specpipe_token"] = m["llama_cpp_logit_of_specpipe_token"] >= m["llama_cpp_logit_of_its_token"]
        div[dtype] = m
    return div


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="checkpoint directory (config.json + safetensors)")
    p.add_argument("--specpipe", required=True)
    p.add_argument("--floor-bench", help="cpu_floor_bench executable: decode and verify windows vs the memory floor")
    p.add_argument("--prompts", default="bench/prompts/public.jsonl")
    p.add_argument("--num-prompts", type=int, default=0, help="first N prompts (0: all)")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--gammas", default="2,4", help="speculative rows: specpipe n-gram and llama.cpp prompt lookup")
    p.add_argument("--lookup-ngram", type=int, default=3, help="llama.cpp prompt lookup's max_ngram_size (specpipe's max_ngram is 3)")
    p.add_argument("--dtypes", default="bf16,f32", help="GGUF types timed (the first is the main peer)")
    p.add_argument("--floor-context", type=int, default=256)
    p.add_argument("--work", default="build/peer", help="GGUF files and intermediate reports")
    p.add_argument("--json", required=True)
    a = p.parse_args()
    a.model = Path(a.model).resolve()
    work = Path(a.work) / a.model.name
    work.mkdir(parents=True, exist_ok=True)
    gammas = [int(g) for g in a.gammas.split(",") if g]
    dtypes = a.dtypes.split(",")
    prompts = load_prompts(a.prompts, a.num_prompts, a.max_tokens)
    prompts_file = work / "prompts.jsonl"
    prompts_file.write_text("".join(json.dumps(x) + "\n" for x in prompts))
    n_ctx = max(len(x["prompt_ids"]) + x["max_tokens"] for x in prompts) + max(gammas + [0]) + 16

    ggufs = {}
    for dtype in dtypes:
        path = work / f"model-{dtype}.gguf"
        newest = max(f.stat().st_mtime for f in a.model.iterdir() if f.suffix in (".json", ".safetensors"))
        if not path.exists() or path.stat().st_mtime < newest:
            print(f"converting {a.model} -> {path}", file=sys.stderr)
            convert(a.model, path, dtype)
        ggufs[dtype] = path

    def make(dtype, draft=None):
        return llama_cpp.Llama(str(ggufs[dtype]), n_ctx=n_ctx, n_threads=a.threads, n_threads_batch=a.threads,
                               draft_model=draft, verbose=False)

    plain = {d: make(d) for d in dtypes}
    lookups = {g: CountingLookup(a.lookup_ngram, g) for g in gammas}
    spec = {g: make(dtypes[0], lookups[g]) for g in gammas}
    for llm in plain.values():
        llama_run(llm, prompts[:1], a.threads)  # warm-up: page the weights in
    for llm in spec.values():
        llama_run(llm, prompts[:1], a.threads)

    runs = {}  # config -> list of per-round dicts
    specpipe_outputs = None
    for r in range(a.repeat):
        rows, specpipe_outputs = specpipe_run(a, prompts_file, gammas, work / f"specpipe-{r}.json")
        for key, row in rows.items():
            runs.setdefault(("specpipe", key), []).append(row)
        for dtype, llm in plain.items():
            runs.setdefault((f"llama.cpp {dtype}", "plain"), []).append(llama_run(llm, prompts, a.threads))
        for g, llm in spec.items():
            before = (lookups[g].calls, lookups[g].proposed)
            row = llama_run(llm, prompts, a.threads)
            rounds = lookups[g].calls - before[0]
            row["tokens_per_step"] = sum(len(t) - 1 for t in row["outputs"]) / max(rounds, 1)
            row["proposed"] = lookups[g].proposed - before[1]
            runs.setdefault((f"llama.cpp {dtypes[0]}", f"lookup{g}"), []).append(row)

    def med(rows, key):
        return statistics.median(x[key] for x in rows if key in x) if any(key in x for x in rows) else None

    table = []
    for (engine, config), rows in runs.items():
        entry = {"engine": engine, "config": config, "rounds": len(rows)}
        for key in ("decode_tok_per_s", "wall_decode_tok_per_s", "e2e_tok_per_s", "cpu_e2e_tok_per_s", "tokens_per_step"):
            if med(rows, key) is not None:
                entry[key] = med(rows, key)
                entry[key + "_runs"] = [x[key] for x in rows]
        if "outputs" in rows[0]:
            entry["equal_to_specpipe_plain"] = rows[-1]["outputs"] == specpipe_outputs
            entry["equal_across_rounds"] = all(x["outputs"] == rows[0]["outputs"] for x in rows)
        if "identical_to_plain" in rows[0]:
            entry["identical_to_plain"] = all(x["identical_to_plain"] for x in rows)
        table.append(entry)

    main_llama = runs[(f"llama.cpp {dtypes[0]}", "plain")][-1]["outputs"]
    checks = {f"greedy_equal_{d}": runs[(f"llama.cpp {d}", "plain")][-1]["outputs"] == specpipe_outputs for d in dtypes}
    for d in dtypes:
        checks[f"first_divergence_{d}"] = explain(
            first_divergence(specpipe_outputs, runs[(f"llama.cpp {d}", "plain")][-1]["outputs"]), prompts,
            specpipe_outputs, plain)
    for g in gammas:
        checks[f"llama_cpp_lookup{g}_equal_to_its_plain"] = runs[(f"llama.cpp {dtypes[0]}", f"lookup{g}")][-1]["outputs"] == main_llama

    def tok_s(engine, config, key):
        for e in table:
            if e["engine"] == engine and e["config"] == config:
                return e[key]
        return None

    ratios = {}
    for key in ("decode_tok_per_s", "cpu_e2e_tok_per_s"):
        r = ratios[key] = {}
        for d in dtypes:
            r["plain_vs_llama_cpp_" + d] = tok_s("specpipe", "plain", key) / tok_s(f"llama.cpp {d}", "plain", key)
        r["plain_vs_strongest_llama_cpp"] = tok_s("specpipe", "plain", key) / max(tok_s(f"llama.cpp {d}", "plain", key) for d in dtypes)
        best_llama = max([tok_s(f"llama.cpp {d}", "plain", key) for d in dtypes] +
                         [tok_s(f"llama.cpp {dtypes[0]}", f"lookup{g}", key) for g in gammas])
        best_specpipe = max([tok_s("specpipe", "plain", key)] + [tok_s("specpipe", f"ngram{g}", key) for g in gammas])
        r["best_vs_best"] = best_specpipe / best_llama

    floor = None
    if a.floor_bench:
        floor_json = work / "floor.json"
        subprocess.run([a.floor_bench, "--model", str(a.model), "--context", str(a.floor_context), "--windows", "1,5",
                        "--threads", str(a.threads), "--json", str(floor_json)], check=True, stdout=subprocess.DEVNULL)
        floor = json.loads(floor_json.read_text())

    doc = {
        "model": str(a.model), "prompts": a.prompts, "num_prompts": len(prompts), "max_tokens": a.max_tokens,
        "threads": a.threads, "repeat": a.repeat, "lookup_max_ngram": a.lookup_ngram,
        "llama_cpp_python": llama_cpp.__version__, "machine": platform.processor() or platform.machine(),
        "load_average": os.getloadavg(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": table, "checks": checks, "ratios": ratios, "floor": floor,
    }
    Path(a.json).write_text(json.dumps(doc, indent=2) + "\n")
    for e in table:
        extra = f"  tok/step {e['tokens_per_step']:.2f}" if "tokens_per_step" in e else ""
        print(f"{e['engine']:16} {e['config']:8} decode {e['decode_tok_per_s']:8.1f} tok/s  e2e {e['e2e_tok_per_s']:8.1f}"
              f"  e2e by CPU time {e['cpu_e2e_tok_per_s']:8.1f}{extra}")
    print(json.dumps({"checks": checks, "ratios": ratios}, indent=2))
    if floor:
        for w in floor["windows"]:
            print(f"window {w['window']}: {w['ms']:.3f} ms, floor {w['floor_ms']:.3f} ms, x floor {w['x_floor']:.3f}, "
                  f"x 1-token {w['x_first_window']:.3f} | by CPU time {w['cpu_ms']:.3f} ms, floor {w['cpu_floor_ms']:.3f}, "
                  f"x floor {w['cpu_x_floor']:.3f}, x 1-token {w['cpu_x_first_window']:.3f}")


if __name__ == "__main__":
    main()
