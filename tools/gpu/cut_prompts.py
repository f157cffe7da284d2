#!/usr/bin/env python3
"""Several long Python-code prompts that end at different places (issue 17's re-measure,
tools/gpu/longctx_remeasure.sh), one JSONL line each, for `specpipe bench --prompt-tokens N`.

Line 1 is tools/gpu/code_prompt.py's prompt (the evaluation prompt of BENCHMARKS 7b: the
standard library's top-level modules from the first in sorted order), so its cut at N
tokens repeats the earlier runs; every further line is a window of the same concatenation
that starts at another module (START names, or --auto K evenly spaced file boundaries), so
its first N tokens end somewhere else. Every window is CHARS characters (default 650,000:
~171K tokens at the demo tokenizer's ~3.8 characters a token, so --prompt-tokens up to
131,072 never runs short; a window that would run past the library's end is an error).

Modules that CPython 3.12 removed (asynchat, asyncore, imp, smtpd) are left out of the
windows after line 1: tools/gpu/longctx_finetune.py drops site-packages files that copy
the standard library of the device's Python (3.12) and of every line of --eval-prompt
(give it this file), so this keeps the windows and the filter in step both ways.

    python3 tools/gpu/cut_prompts.py OUT.jsonl [--chars 650000] [--auto 4 | --starts a.py,b.py]
"""
import argparse
import hashlib
import json
import sys

from code_prompt import as_file, stdlib_modules

REMOVED_IN_312 = {"asynchat.py", "asyncore.py", "imp.py", "smtpd.py"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--chars", type=int, default=650000)
    p.add_argument("--auto", type=int, default=4, help="windows in all (line 1 included), evenly spaced")
    p.add_argument("--starts", default="", help="module names the windows after line 1 start at (instead of --auto)")
    args = p.parse_args()
    files = [(name, as_file(name, source)) for name, source in stdlib_modules()]
    names = [n for n, _ in files]
    later = [(n, t) for n, t in files if n not in REMOVED_IN_312]
    # where each module starts in the windows' concatenation, and how much text follows it
    offsets, total = {}, 0
    for n, t in later:
        offsets[n] = total
        total += len(t)
    fits = [n for n, _ in later if total - offsets[n] >= args.chars]
    if args.starts:
        starts = [s.strip() for s in args.starts.split(",") if s.strip()]
        for s in starts:
            if s not in offsets:
                print(f"cut_prompts: {s}: no such module (or removed in 3.12)", file=sys.stderr)
                return 1
            if s not in fits:
                print(f"cut_prompts: {s}: fewer than {args.chars} characters follow it", file=sys.stderr)
                return 1
    else:
        # evenly spaced by text offset over the modules that leave a full window; the first
        # window (line 1) covers offset 0, so start the others one window's length apart
        # where the library allows, else evenly over what is left
        k = args.auto - 1
        last = offsets[fits[-1]]
        step = max(1, min(args.chars, last // max(1, k)))
        starts = []
        for i in range(1, k + 1):
            target = min(last, i * step)
            s = next(n for n in fits if offsets[n] >= target)
            if s not in starts:
                starts.append(s)
    lines = []
    text0 = "".join(t for _, t in files)[:args.chars]
    lines.append(("first", names[0], text0))
    joined = "".join(t for _, t in later)
    for s in starts:
        lines.append(("window", s, joined[offsets[s]:offsets[s] + args.chars]))
    version = ".".join(map(str, sys.version_info[:3]))
    with open(args.out, "w", encoding="utf-8") as f:
        for i, (kind, start, text) in enumerate(lines):
            assert len(text) == args.chars, (start, len(text))
            line = {"prompt": text, "max_tokens": 128, "cut": i, "start": start,
                    "source": f"CPython {version} standard library top-level modules from {start}, "
                              f"first {args.chars} characters" + ("" if kind == "first" else
                                                                 ", without " + " ".join(sorted(REMOVED_IN_312))),
                    "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
            f.write(json.dumps(line) + "\n")
            print(f"cut_prompts: line {i + 1}: from {start}, sha256 {line['sha256'][:16]}")
    print(f"cut_prompts: {args.out}: {len(lines)} prompts of {args.chars} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
