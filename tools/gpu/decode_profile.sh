#!/usr/bin/env bash
# On the GPU machine, after tools/gpu/bundle.sh (specpipe_gpu_generate): where the 8B-shaped
# decode step's time goes against its read-bandwidth floor (issue 16 item 2, issue 20).
#   1. the read-only rate (read_bandwidth.py), as gemm_variants.sh;
#   2. per context, `--synthetic SHAPE --context N` without SPECPIPE_SYNTHETIC_QUICK: the
#      graphed step with kernel groups left out (full, GEMMs only, all but the GEMMs, all
#      but the attention), against the floor of what each reads;
#   3. per context in NCU_CONTEXTS, ncu (no cache flush, clocks as they are) over the
#      first eager decode step: each kernel alone (serialised, so no PDL overlap), its
#      time and DRAM bytes, summed by class (qkv / o / gate_up / down / lm_head GEMM,
#      attention, head merge, row kernels) against the bytes at the read rate.
# Nsight Systems is not usable on these machines (KINDS.md), so the in-graph overlap is
# read from 2 (what a group adds to the real step) and 3 (what it costs alone).
# Environment: SHAPES_CONTEXTS ("llama3-8b:512 llama3.1-8b:8192 llama3.1-8b:32768"),
# NCU_CONTEXTS ("llama3-8b:512 llama3.1-8b:32768"), ITERS (10), KV_DTYPE (fp32), READ_GBPS.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate decode_profile
gpu_environment decode_profile
cat "$out/decode_profile_environment.txt"
ncu_bin="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n1 || true)"
echo "ncu: ${ncu_bin:-none}; nsys: $(command -v nsys || echo none)"
read_gbps="${READ_GBPS:-$(python3 "$(dirname "$0")/read_bandwidth.py")}"
echo "read-only bandwidth: $read_gbps GB/s"
status=0
for sc in ${SHAPES_CONTEXTS:-llama3-8b:512 llama3.1-8b:8192 llama3.1-8b:32768}; do
  shape=${sc%%:*} context=${sc##*:}
  json="$out/dp_${shape}_${context}.json"
  timeout 150 "$exe" --synthetic "$shape" --context "$context" --prefill-max 0 --iters "${ITERS:-10}" \
    --kv-dtype "${KV_DTYPE:-fp32}" >"$json" 2>"${json%.json}.stderr" || status=1
  python3 - "$json" "$read_gbps" <<'PY' || echo "$sc: no report"
import json, sys
r, rate = json.load(open(sys.argv[1])), float(sys.argv[2]) * 1e9
w, kv = r["matrix_bytes_per_step"], r["kv_bytes_read_per_step"]
fl, fl_w = (w + kv) / rate * 1e6, w / rate * 1e6
g = r["graphs"]
print(f"{r['model']} context {r['context']}: step {g['decode_us']:.0f} us, floor {fl:.0f} us (weights {fl_w:.0f}, "
      f"K/V {fl - fl_w:.0f}), {g['decode_us'] / fl:.3f}x")
for b in r.get("breakdown_graphs", []):
    full, gem, nog, noatt = b["full_us"], b["gemms_only_us"], b["all_but_gemms_us"], b["all_but_attention_us"]
    print(f"  n={b['n']}: full {full:.0f} | GEMMs only {gem:.0f} ({gem / fl_w:.3f}x weights) | all but GEMMs {nog:.0f}"
          f" | all but attention {noatt:.0f} -> attention adds {full - noatt:.0f} (K/V floor {fl - fl_w:.0f}),"
          f" row kernels add {noatt - gem:.0f}")
PY
done
summarize() {  # ncu csv, read rate
  python3 - "$1" "$2" <<'PY' || true
import collections, csv, sys
rate = float(sys.argv[2]) * 1e9
# The program's own output (its JSON) shares the file: keep the header and the rows under it.
rows = list(csv.reader(open(sys.argv[1])))
hi = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "ID" in r), None)
if hi is None:
    print("  no ncu rows"); sys.exit(0)
head = rows[hi]
body = [r for r in rows[hi + 1:] if len(r) == len(head) and r[0].isdigit()]
ki, mi, vi, ui = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value"), head.index("Metric Unit")
idi = head.index("ID")
kern = collections.OrderedDict()
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "byte": 1}  # --print-units base
for r in body:
    k = kern.setdefault(r[idi], {"name": r[ki]})
    k[r[mi]] = float(r[vi].replace(",", "")) * scale.get(r[ui], 1.0)
ks = list(kern.values())
# The first whole decode step: from the first embedding kernel through the next argmax.
s = next(i for i, k in enumerate(ks) if "embedding" in k["name"])
e = next(i for i in range(s, len(ks)) if "argmax" in ks[i]["name"])
step = ks[s:e + 1]
# A layer's GEMMs come in the order qkv, o_proj, gate_up (+ SiLU), down_proj; lm_head last.
gemm_names = ["qkv", "o_proj", "gate_up", "down_proj"]
gi = 0
tot = collections.defaultdict(lambda: [0, 0.0, 0.0])
ngemm = sum(1 for k in step if "gemm" in k["name"])
for k in step:
    n = k["name"]
    if "gemm" in n:
        c = ("lm_head" if gi == ngemm - 1 else gemm_names[gi % 4]) + " GEMM"
        gi += 1
    else:
        c = n.replace("(anonymous namespace)::", "").replace("<unnamed>::", "").replace("void ", "")
        c = c.split("(")[0].split("<")[0].split("::")[-1][:48]
    t = tot[c]
    t[0] += 1
    t[1] += k.get("gpu__time_duration.sum", 0.0)
    t[2] += k.get("dram__bytes_read.sum", 0.0)
all_us = sum(t[1] for t in tot.values())
all_b = sum(t[2] for t in tot.values())
print(f"  one eager step, {len(step)} kernels, each alone: {all_us:.0f} us, DRAM read {all_b / 1e9:.3f} GB "
      f"(at the read rate {all_b / rate * 1e6:.0f} us)")
print(f"  {'class':48s} {'n':>4s} {'us':>8s} {'us each':>8s} {'GB read':>8s} {'floor us':>8s} {'x floor':>7s} {'excess us':>9s}")
for c, (n, us, b) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
    f = b / rate * 1e6
    print(f"  {c:48s} {n:4d} {us:8.1f} {us / n:8.2f} {b / 1e9:8.3f} {f:8.1f} {us / f if f > 0 else 0:7.3f} {us - f:9.1f}")
PY
}
if [[ -n "$ncu_bin" ]]; then
  for sc in ${NCU_CONTEXTS:-llama3-8b:512 llama3.1-8b:32768}; do
    shape=${sc%%:*} context=${sc##*:}
    csvf="$out/ncu_${shape}_${context}.csv"
    SPECPIPE_SYNTHETIC_QUICK=1 timeout 200 "$ncu_bin" --cache-control none --clock-control none --csv --print-units base \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --kernel-name regex:"gemm|attention|norm|rope|argmax|embedding|residual" --launch-count "${NCU_COUNT:-300}" \
      "$exe" --synthetic "$shape" --context "$context" --prefill-max 0 --iters 3 --kv-dtype "${KV_DTYPE:-fp32}" \
      >"$csvf" 2>"${csvf%.csv}.stderr"
    echo "ncu $sc: exit $?"
    summarize "$csvf" "$read_gbps"
  done
fi
for f in "$out"/*.stderr; do [[ -s "$f" ]] || rm -f "$f"; done
exit $status
