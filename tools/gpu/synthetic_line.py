"""One table line for a specpipe_gpu_generate --synthetic report (SPECPIPE_SYNTHETIC_QUICK
runs of tools/gpu/split_kv.sh and gemm_variants.sh): the decode step, the floor counting
weights + K/V at the read-only rate given (read_bandwidth.py), decode / floor and the
5-token window / step. The floor and the rate are written back into the JSON.
Usage: synthetic_line.py JSON READ_GBPS EXIT_STATUS LABEL..."""
import json
import sys

path, read_gbps, rc, labels = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
r = json.load(open(path))
if "error" in r:
    print(" ".join(labels), "error:", r["error"])
    sys.exit(0)
g = r["graphs"]
w5 = next(w["relative"] for w in g["windows"] if w["n"] == 5)
floor = (r["matrix_bytes_per_step"] + r["kv_bytes_read_per_step"]) / (read_gbps * 1e9) * 1e6
r["read_only_GBps"] = read_gbps
r["floor_with_kv_read_only_us"] = floor
json.dump(r, open(path, "w"), indent=1)
same = all(x["bitwise_identical"] for x in r["graph_vs_eager"])
print(" ".join(f"{x:>8s}" for x in labels), f"{g['decode_us']:10.1f} {floor:11.1f} {g['decode_us'] / floor:8.3f} "
      f"{w5:7.3f} graph==eager {same} exit {rc}")
