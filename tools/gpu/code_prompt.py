#!/usr/bin/env python3
"""A long Python-code prompt for `specpipe bench` (tools/gpu/specpv_long_e2e.sh).

Concatenates the top-level modules of this interpreter's standard library, in sorted
order of their names, each after a "# file: NAME" line, until CHARS characters, and writes
one JSONL line {"prompt": text, "max_tokens": 128, "source": ..., "sha256": ...}. The
engine's tokenizer turns it into ids and `specpipe bench --prompt-tokens N` keeps the
first N of them (about 3.8 characters a token with the demo pair's tokenizer), so one
file serves every context length up to CHARS / 3.8 tokens.

The text depends on the Python version only (its standard library): the line records
the version and the text's sha256, so a rerun can check it made the same prompt
(BENCHMARKS 7b names the ones measured).

    python3 tools/gpu/code_prompt.py OUT.jsonl [CHARS]   # CHARS default 640000
"""
import hashlib
import json
import pathlib
import sys
import sysconfig


def stdlib_modules():
    """(name, source) of this interpreter's standard-library top-level modules, sorted by
    name: the text every evaluation prompt is cut from (cut_prompts.py) and that the
    fine-tune keeps out of its training text (longctx_finetune.py)."""
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    return [(path.name, path.read_text(encoding="utf-8", errors="replace"))
            for path in sorted(stdlib.glob("*.py"), key=lambda p: p.name)]


def as_file(name, source):
    """A module as the prompts hold it: after a "# file: NAME" line."""
    return f"# file: {name}\n{source}\n"


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    out = pathlib.Path(sys.argv[1])
    chars = int(sys.argv[2]) if len(sys.argv) == 3 else 640000
    parts, total, names = [], 0, []
    for name, source in stdlib_modules():
        text = as_file(name, source)
        parts.append(text)
        names.append(name)
        total += len(text)
        if total >= chars:
            break
    text = "".join(parts)[:chars]
    if len(text) < chars:
        print(f"code_prompt: the standard library at {sysconfig.get_paths()['stdlib']} has only {len(text)} characters", file=sys.stderr)
        return 1
    version = ".".join(map(str, sys.version_info[:3]))
    line = {"prompt": text, "max_tokens": 128,
            "source": f"CPython {version} standard library, {names[0]} .. {names[-1]} ({len(names)} files), "
                      f"first {chars} characters",
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    out.write_text(json.dumps(line) + "\n", encoding="utf-8")
    print(f"code_prompt: {out}: {line['source']}, sha256 {line['sha256'][:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
