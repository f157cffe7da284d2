"""The summary of a specpipe_cuda_check report (JSON): "LABEL: passed/all pass, exit N" and
each failing check. As a script (check_report.py JSON LABEL EXIT_STATUS) it prints just
that; the scripts that print more of the report import summarise() and go on with the
JSON it returns (tools/gpu/gemm_variants.sh, split_kv.sh)."""
import json
import sys


def summarise(path, label, rc):
    r = json.load(open(path))
    checks = r.get("checks", [])
    bad = [c for c in checks if not c.get("pass", c.get("ok", True))]
    print(f"{label}: {len(checks) - len(bad)}/{len(checks)} pass, exit {rc}")
    for c in bad:
        print("  FAIL", json.dumps(c)[:300])
    return r


if __name__ == "__main__":
    summarise(*sys.argv[1:4])
