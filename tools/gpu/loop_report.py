#!/usr/bin/env python3
"""How periodic each greedy continuation in `specpipe bench` JSONs is (issue 17's re-measure,
BENCHMARKS 7b): a recent-window verifier (SpecPV) checks a loop easily, so a speedup
measured on a looping continuation says little. For each prompt's plain output
(plain_outputs: every lossless row equals it), tokens in a repeated n-gram loop are those
covered by a stretch where token i equals token i - p for some period p <= MAX_PERIOD
(default 64), the stretch at least max(p, MIN_RUN) tokens long (so the loop's body occurs
at least twice), the first copy of the body counted too. Prints per prompt: tokens, the
fraction in loops, the periodic tail (how many of the last tokens are periodic, and the
period), and LOOP when the fraction is >= --flag (default 0.5); with --tokenizer (a
tokenizer.json, needs the `tokenizers` package) the last --show characters of the text.

    python3 tools/gpu/loop_report.py BENCH.json [...] [--tokenizer DIR/tokenizer.json] [--json OUT]

Exit status 0 (the report is information, not a check).
"""
import argparse
import json
import sys


def loop_mask(ids, max_period=64, min_run=8):
    """True where token i sits in a repeated n-gram loop (see the module doc)."""
    n = len(ids)
    mask = [False] * n
    for p in range(1, min(max_period, n - 1) + 1):
        i = p
        while i < n:
            if ids[i] != ids[i - p]:
                i += 1
                continue
            j = i
            while j < n and ids[j] == ids[j - p]:
                j += 1
            if j - i >= max(p, min_run):
                for k in range(i - p, j):
                    mask[k] = True
            i = j
    return mask


def periodic_tail(ids, max_period=64, min_run=8):
    """(length, period): the longest periodic suffix (at least max(p, min_run) repeats of
    tokens past its first period), over periods <= max_period; (0, 0) if none."""
    best = (0, 0)
    n = len(ids)
    for p in range(1, min(max_period, n - 1) + 1):
        j = n
        while j - 1 - p >= 0 and ids[j - 1] == ids[j - 1 - p]:
            j -= 1
        run = n - j
        if run >= max(p, min_run) and run + p > best[0]:
            best = (run + p, p)
    return best


def report(ids, args):
    mask = loop_mask(ids, args.max_period, args.min_run)
    frac = sum(mask) / max(1, len(ids))
    tail, period = periodic_tail(ids, args.max_period, args.min_run)
    return {"tokens": len(ids), "loop_fraction": round(frac, 4), "periodic_tail": tail, "tail_period": period,
            "distinct_4grams": round(len({tuple(ids[i:i + 4]) for i in range(max(0, len(ids) - 3))})
                                     / max(1, len(ids) - 3), 4),
            "loop": frac >= args.flag}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("benches", nargs="+", help="bench JSON files (their plain_outputs)")
    p.add_argument("--max-period", type=int, default=64)
    p.add_argument("--min-run", type=int, default=8)
    p.add_argument("--flag", type=float, default=0.5)
    p.add_argument("--tokenizer", default="", help="tokenizer.json to print the text's end")
    p.add_argument("--show", type=int, default=160)
    p.add_argument("--json", default="", help="write the per-prompt figures here")
    args = p.parse_args()
    tok = None
    if args.tokenizer:
        try:
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(args.tokenizer)
        except Exception as e:  # the report goes on without the text
            print(f"loop_report: no text ({e})", file=sys.stderr)
    out = {}
    for path in args.benches:
        try:
            d = json.load(open(path))
        except (OSError, ValueError) as e:
            print(f"{path}: unreadable ({e})")
            continue
        rows = []
        for i, ids in enumerate(d.get("plain_outputs", [])):
            r = report(ids, args)
            rows.append(r)
            line = (f"{path} prompt {i}: {r['tokens']} tokens, {100 * r['loop_fraction']:.0f}% in loops, periodic tail "
                    f"{r['periodic_tail']} (period {r['tail_period']}), distinct 4-grams {100 * r['distinct_4grams']:.0f}%"
                    + ("  LOOP" if r["loop"] else ""))
            print(line)
            if tok is not None:
                try:
                    print("    ..." + repr(tok.decode(ids)[-args.show:]))
                except Exception as e:  # the figures above stand without the text
                    print(f"    (no text: {e})")
        out[path] = rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
