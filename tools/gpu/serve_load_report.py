#!/usr/bin/env python3
"""tools/gpu/serve_load.sh's report: reads OUT/load_<mode>_c<clients>.json (bench/load_generator
--endpoint --record-tokens), checks that every request streamed the same greedy token ids as its
prompt run alone (mode plain at 1 client, requests one after another), and writes the table
(OUT/serve_load.md), a summary without the token ids (OUT/serve_load.json) and issue 18's goals.
Exit status 1 if a request failed or an output differed, 2 if the reference run is missing."""
import json
import pathlib
import re
import sys

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-out")
runs = []
for path in sorted(out.glob("load_*_c*.json")):
    m = re.fullmatch(r"load_(.+)_c(\d+)\.json", path.name)
    doc = json.loads(path.read_text())
    for r in doc["results"]:
        runs.append((m.group(1), int(m.group(2)), r))

reference = {}  # prompt index -> token ids, from plain at 1 client
for mode, clients, r in runs:
    if mode == "plain" and clients == 1:
        for o in r.get("outputs", []):
            if o["ok"]:
                reference.setdefault(o["prompt"], o["tokens"])
if not reference:
    print("serve_load_report: no plain 1-client run (load_plain_c1.json): nothing to compare with", file=sys.stderr)
    sys.exit(2)

def order(mode):  # plain, then draft gammas ascending, then the rest
    g = re.fullmatch(r"draft_g(\d+)", mode)
    return (0 if mode == "plain" else 1 if g else 2, int(g.group(1)) if g else 0, mode)

PLAN_COUNTERS = ("rounds", "drafting_rounds", "probe_rounds", "probe_only_rounds", "probes", "probes_skipped",
                 "probes_held", "probes_lost", "measure_hold_rounds", "speculation_off", "plain_rounds_measured")
rows, failed = [], False
for mode, clients, r in sorted(runs, key=lambda x: (order(x[0]), x[1])):
    outputs = r.get("outputs", [])
    def matches(o):  # runs of other lengths (the sync counts' 128 tokens) match on the shorter
        ref = reference.get(o["prompt"])
        n = min(len(ref), len(o["tokens"])) if ref is not None else 0
        return ref is not None and n > 0 and o["tokens"][:n] == ref[:n]
    same = sum(1 for o in outputs if o["ok"] and matches(o))
    unchecked = sum(1 for o in outputs if o["ok"] and o["prompt"] not in reference)
    diffs = []
    for o in outputs:
        ref = reference.get(o["prompt"])
        if o["ok"] and ref is not None and not matches(o):
            first = next((i for i, (a, b) in enumerate(zip(ref, o["tokens"])) if a != b), min(len(ref), len(o["tokens"])))
            diffs.append({"prompt": o["prompt"], "client": o["client"], "request": o["request"], "first_diff": first,
                          "len": len(o["tokens"]), "ref_len": len(ref)})
    errors = [o["error"] for o in outputs if not o["ok"]]
    # Tokens per round (each request's final stats): how much a mode speculated.
    rounds = sum(o.get("rounds") or 0 for o in outputs if o["ok"])
    per_round = sum(len(o["tokens"]) for o in outputs if o["ok"]) / rounds if rounds else None
    failed = failed or bool(diffs) or bool(errors) or r["errors"] > 0
    # Where a round goes (the server's per-request times over its rounds): each is a sum
    # over the rounds the request was in of the batch's time, so over the rounds it is the
    # mean round's (bench/load_generator records them since the SCV breakdown).
    per_round_ms = {}
    if rounds:
        for key in ("draft_ms", "verify_ms", "commit_ms", "messaging_ms", "queued_ms", "wall_ms"):
            total = [o["times"][key] for o in outputs if o["ok"] and key in (o.get("times") or {})]
            if total:
                per_round_ms[key] = sum(total) / rounds
    # The verify_plan strategy's counters over the measured level (bench/load_generator's
    # stats before and after it, with --endpoint): SCV's rounds, drafting and probe rounds.
    plan_counters = {}
    before = ((r.get("strategies_before") or {}).get("verify_plan") or {})
    after = ((r.get("strategies_after") or {}).get("verify_plan") or {})
    for key in PLAN_COUNTERS:
        if isinstance(after.get(key), (int, float)):
            plan_counters[key] = after[key] - (before.get(key) or 0)
    rows.append({"mode": mode, "clients": clients, "requests": r["requests"], "errors": r["errors"],
                 "tokens_per_s": r["tokens_per_s"], "requests_per_s": r["requests_per_s"],
                 "ttft_p50_ms": r["ttft_p50_ms"], "ttft_p99_ms": r["ttft_p99_ms"], "itl_p50_ms": r["itl_p50_ms"],
                 "itl_p99_ms": r["itl_p99_ms"], "seconds": r["seconds"], "tokens_per_round": per_round, "per_round_ms": per_round_ms, "plan_counters": plan_counters, "identical": same,
                 "checked": len(outputs) - unchecked - len(errors), "unchecked": unchecked,
                 "differing": diffs[:8], "n_differing": len(diffs), "error_samples": errors[:3]})

by = {(r["mode"], r["clients"]): r for r in rows}
levels = sorted({r["clients"] for r in rows})
# The goals compare the modes a server is run for; off_* (MODES=off: the draft model
# loaded, never drafting) only explain costs.
modes = sorted({r["mode"] for r in rows if not r["mode"].startswith(("syncs_", "base_", "off_"))}, key=order)
draft_modes = [m for m in modes if m.startswith("draft_g")]

def tps(mode, clients):
    r = by.get((mode, clients))
    return r["tokens_per_s"] if r else None

goals = []
plain1 = tps("plain", 1)
if plain1:
    best1 = max(((tps(m, 1) or 0, m) for m in modes if m != "plain"), default=(0, None))
    goals.append({"goal": "1 client: speculation >= 1.8x plain", "best_mode": best1[1],
                  "ratio": best1[0] / plain1, "ratios": {m: (tps(m, 1) or 0) / plain1 for m in modes if m != "plain"},
                  "met": best1[0] / plain1 >= 1.8})
# SCV (and scv_line: by the cost line alone), and an older SCV run beside it (BASE_MODES=scv:
# base_scv), against this binary's plain and fixed gammas.
for scv in ("scv", "scv_line", "base_scv", "base_scv_line"):
    for c in levels:
        if tps(scv, c) is None:
            continue
        fixed = max(((tps(m, c) or 0, m) for m in ["plain"] + draft_modes), default=(0, None))
        if fixed[0] > 0:
            ratio = tps(scv, c) / fixed[0]
            goals.append({"goal": f"{c} clients: {scv} >= 0.95x the better of plain and the best fixed gamma",
                          "reference_mode": fixed[1], "ratio": ratio, "met": ratio >= 0.95})
top = max(levels) if levels else None
if plain1 and top and top != 1:
    best_top = max(((tps(m, top) or 0, m) for m in modes), default=(0, None))
    goals.append({"goal": f"{top} clients >= 10x the 1-client plain tokens/s", "plain_ratio": (tps("plain", top) or 0) / plain1,
                  "best_mode": best_top[1], "ratio": best_top[0] / plain1, "met": best_top[0] / plain1 >= 10})

# Host syncs per round (serve_load.sh SYNCS=1): libserve_sync_count.so's counts of each
# traced server, over the rounds its requests report; 128 minus 64 new tokens gives the
# count per decode round with start-up and prefill cancelled out.
SYNC_CALLS = ("cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy")
syncs = {}
for path in sorted(out.glob("syncs_*_t*.txt")):
    m = re.fullmatch(r"syncs_(.+)_t(\d+)\.txt", path.name)
    calls = dict((k, int(v)) for k, v in (line.split() for line in path.read_text().split("\n") if line.strip()))
    rounds = sum(o.get("rounds") or 0 for mode, c, r in runs if mode == f"syncs_{m.group(1)}_t{m.group(2)}"
                 for o in r.get("outputs", []))
    syncs.setdefault(m.group(1), {})[int(m.group(2))] = {"calls": calls, "rounds": rounds,
                                                          "syncs": sum(calls.get(k, 0) for k in SYNC_CALLS)}
for mode, by_tokens in syncs.items():
    if len(by_tokens) == 2:
        (t0, a0), (t1, a1) = sorted(by_tokens.items())
        if a1["rounds"] > a0["rounds"]:
            by_tokens["per_round"] = (a1["syncs"] - a0["syncs"]) / (a1["rounds"] - a0["rounds"])
            by_tokens["stream_syncs_per_round"] = (
                (a1["calls"].get("cuStreamSynchronize", 0) + a1["calls"].get("cuEventSynchronize", 0)
                 - a0["calls"].get("cuStreamSynchronize", 0) - a0["calls"].get("cuEventSynchronize", 0))
                / (a1["rounds"] - a0["rounds"]))

meta = {p.stem: p.read_text().strip() for p in (out / "gpu.txt", out / "date.txt") if p.exists()}
(out / "serve_load.json").write_text(json.dumps({"meta": meta, "rows": rows, "goals": goals, "syncs": syncs}, indent=2) + "\n")

md = ["| mode | clients | requests | tokens/s | vs plain | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | tokens/round | same as alone |",
      "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    p = tps("plain", r["clients"])
    md.append(f"| {r['mode']} | {r['clients']} | {r['requests']}{' (' + str(r['errors']) + ' errors)' if r['errors'] else ''} "
              f"| {r['tokens_per_s']:,.0f} | {r['tokens_per_s'] / p:.2f}x | {r['ttft_p50_ms']:.1f} ms | {r['ttft_p99_ms']:.1f} ms "
              f"| {r['itl_p50_ms']:.2f} ms | {r['itl_p99_ms']:.2f} ms "
              f"| {r['tokens_per_round'] or 0:.2f} | {r['identical']}/{r['checked']} |"
              if p else f"| {r['mode']} | {r['clients']} | ... |")
md.append("")
if any(r["per_round_ms"] for r in rows):
    md += ["Per round (ms, the server's times over the requests' rounds): draft / verify / KV commit / messaging "
           "(the hops) / queued (waiting for a stage busy with another micro-batch's round); "
           "a request's wall time over its rounds (queueing and prefill included)", "",
           "| mode | clients | draft | verify | commit | messaging | queued | sum | wall / round |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["per_round_ms"]
        if t:
            parts = [t.get(k, 0) for k in ("draft_ms", "verify_ms", "commit_ms", "messaging_ms", "queued_ms")]
            md.append(f"| {r['mode']} | {r['clients']} | " + " | ".join(f"{x:.3f}" for x in parts) +
                      f" | {sum(parts):.3f} | {t.get('wall_ms', 0):.3f} |")
    md.append("")
if any(r["plan_counters"].get("rounds") for r in rows):
    md += ["The verify_plan strategy over each measured level (its counters before and after): rounds planned, "
           "rounds with drafts (probes included), with probes, drafting for probes alone; probes "
           "(sequence-rounds), due but skipped (no acceptance pays) or held (backoff), lost; one-sequence rounds "
           "holding an unmeasured gamma; rounds the host ran plain to measure it", "",
           "| mode | clients | rounds | drafting | probe rounds | probe only | probes | skipped | held | lost "
           "| measure hold | plain measured |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["plan_counters"]
        if c.get("rounds"):
            md.append(f"| {r['mode']} | {r['clients']} | " + " | ".join(
                str(c[k]) if k in c else "-" for k in ("rounds", "drafting_rounds", "probe_rounds", "probe_only_rounds",
                                                        "probes", "probes_skipped", "probes_held", "probes_lost",
                                                        "measure_hold_rounds", "plain_rounds_measured")) + " |")
    md.append("")
for g in goals:
    md.append(f"- {g['goal']}: {g['ratio']:.2f}x ({g.get('best_mode') or g.get('reference_mode')}): "
              f"{'met' if g['met'] else 'NOT met'}")
for mode, by_tokens in syncs.items():
    runs_text = "; ".join(f"{t} tokens: {a['syncs']} syncs / {a['rounds']} rounds (hooked {a['calls'].get('hooked')})"
                          for t, a in by_tokens.items() if isinstance(t, int))
    md.append(f"- host syncs, {mode}, 1 client: {by_tokens.get('per_round', float('nan')):.2f} synchronising calls per "
              f"decode round ({by_tokens.get('stream_syncs_per_round', float('nan')):.2f} stream/event syncs); {runs_text}")
text = "\n".join(md) + "\n"
(out / "serve_load.md").write_text(text)
print(" ".join(f"{k}: {v}" for k, v in meta.items()))
print(text)
for r in rows:
    if r["n_differing"] or r["errors"]:
        print(f"{r['mode']} at {r['clients']} clients: {r['n_differing']} outputs differ from alone "
              f"{r['differing'][:3]}, {r['errors']} errors {r['error_samples'][:1]}")
sys.exit(1 if failed else 0)
