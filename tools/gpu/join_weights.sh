#!/usr/bin/env bash
# Here (no GPU): join the trained target's pieces that tools/gpu/longctx_remeasure.sh split
# into $OUT (demo-target-long.tar.part-00, -01, ...) back into a model directory, checking
# each piece's sha256 against the call's longctx_remeasure.json (weights_sha256) first.
#   tools/gpu/join_weights.sh FILES_AT [DEST]   # DEST default /tmp -> /tmp/demo-target-long
# Then, e.g., bench/specpv_probe --model /tmp/demo-target-long ... (BENCHMARKS 7b) or
# specpipe generate/bench with --model /tmp/demo-target-long (YaRN x16: max 131,072 positions).
set -euo pipefail
src="${1:?FILES_AT: the folder holding demo-target-long.tar.part-NN and longctx_remeasure.json}"
dest="${2:-/tmp}"
shopt -s nullglob
pieces=("$src"/demo-target-long.tar.part-*)
(( ${#pieces[@]} )) || { echo "join_weights: no demo-target-long.tar.part-* in $src" >&2; exit 2; }
if [[ -f "$src/longctx_remeasure.json" ]]; then
  python3 - "$src" <<'PY'
import hashlib, json, pathlib, sys
src = pathlib.Path(sys.argv[1])
want = json.load(open(src / "longctx_remeasure.json")).get("weights_sha256", {})
have = sorted(p.name for p in src.glob("demo-target-long.tar.part-*"))
if sorted(want) != have:
    sys.exit(f"join_weights: pieces {have}, the call wrote {sorted(want)}")
for name in have:
    got = hashlib.sha256((src / name).read_bytes()).hexdigest()
    if got != want[name]:
        sys.exit(f"join_weights: {name}: sha256 {got}, the call wrote {want[name]}")
print(f"join_weights: {len(have)} pieces, sha256 as written")
PY
else
  echo "join_weights: no longctx_remeasure.json beside the pieces: sha256 not checked" >&2
fi
mkdir -p "$dest"
rm -rf "$dest/demo-target-long"
cat "${pieces[@]}" | tar -x -C "$dest"
[[ -f "$dest/demo-target-long/config.json" ]] || { echo "join_weights: no config.json in the archive" >&2; exit 1; }
echo "join_weights: $dest/demo-target-long: $(ls "$dest/demo-target-long" | tr '\n' ' ')"
