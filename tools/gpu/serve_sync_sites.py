#!/usr/bin/env python3
"""Names the frames of libserve_sync_count.so's call sites (SERVE_SYNC_COUNT_SITES=N).

Usage: serve_sync_sites.py SITES_FILE BINARY...

SITES_FILE is a server's "<counts file>.sites" (tools/gpu/serve_sync_count.c): one site a
line, "count name frame...", a frame as object+0xoffset. Each frame in an object whose
file name is a BINARY's (the unstripped build of the bundle's stripped specpipe: same
code, same offsets) is named with addr2line (function and file:line of the call, from the
return address - 1); other frames are printed as they are. Prints each site as its count
and entry point, then one indented line a frame.
"""
import os
import subprocess
import sys


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    binaries = {os.path.basename(b): b for b in argv[2:]}
    sites = []
    wanted = {}  # object -> offsets to name
    for line in open(argv[1]):
        parts = line.split()
        if len(parts) < 2 or not parts[0].isdigit() or parts[1].startswith("("):
            print(line.rstrip())  # the dropped-calls line
            continue
        frames = []
        for f in parts[2:]:
            obj, _, off = f.rpartition("+0x")
            frames.append((obj, int(off, 16) if obj else None, f))
            if obj in binaries:
                wanted.setdefault(obj, set()).add(int(off, 16))
        sites.append((parts[0], parts[1], frames))
    names = {}
    for obj, offsets in wanted.items():
        offsets = sorted(offsets)
        out = subprocess.run(["addr2line", "-f", "-C", "-e", binaries[obj]] + [hex(max(o - 1, 0)) for o in offsets],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        for i, o in enumerate(offsets):
            names[(obj, o)] = f"{out[2 * i]} ({os.path.basename(out[2 * i + 1])})"
    for count, name, frames in sites:
        print(f"{count} {name}")
        for obj, off, raw in frames:
            print(f"    {names.get((obj, off), raw)}")


if __name__ == "__main__":
    main(sys.argv)
