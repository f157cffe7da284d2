#!/usr/bin/env bash
# The same `specpipe` binary under load with and without an environment setting, in one
# call: for each setting of ENV_VARIANTS (space-separated NAME=VALUE, e.g.
# "SPECPIPE_GEMM_MMA_VARIANT=3 SPECPIPE_CUDA_PDL=0"), tools/gpu/serve_load.sh runs MODES
# with the binary as it is and then as base_<mode> through a wrapper that sets the
# variable: a runtime switch (a kernel variant, PDL) bisected without a second build.
# Each setting gets its own pair of runs, so every ratio is of neighbouring servers.
#
# Here: the serve bundle as in serve_load.sh's header. On the GPU machine:
#   SPECPIPE_BUNDLE=gpu-bundle-serve ENV_VARIANTS="SPECPIPE_GEMM_MMA_VARIANT=3" \
#     CLIENTS=1 REQUESTS=1:16 MODES="plain draft" DRAFT_GAMMAS="2 4" bash tools/gpu/serve_env_ab.sh
# On the CPU (a check of the script): SERVE_BUILD=<build dir> DEVICE=cpu CLIENTS=1 REQUESTS=1:2
#   MAX_TOKENS=8 DRAFT_GAMMAS=4 ENV_VARIANTS=SPECPIPE_CUDA_PDL=0 OUT=/tmp/envab bash tools/gpu/serve_env_ab.sh
# Other variables pass through to serve_load.sh (CLIENTS, MODES, DRAFT_GAMMAS, ...);
# SYNCS defaults to 0 here. ROUNDS (1) repeats the whole list; at the end a table of every
# mode's tokens/s (and tokens a round) by level, round by round, and each SCV mode's ratio
# to the better of plain and the best fixed gamma of its own round. With a variable
# nothing reads (ENV_VARIANTS=SPECPIPE_AB_NOOP=1, BASE_MODES="plain scv") the base_* runs
# are the same servers again, alternated: what the spread between servers is.
set -uo pipefail
root="$(pwd)"
here="$(dirname "$0")"
if [[ -n "${SERVE_BUILD:-}" ]]; then exe="$(realpath "$SERVE_BUILD")/apps/specpipe"  # on the CPU, as serve_load.sh
else exe="$root/${SPECPIPE_BUNDLE:-gpu-bundle}/bin/specpipe"; fi
[[ -x "$exe" ]] || { echo "serve_env_ab: $exe missing" >&2; exit 2; }
out="${OUT:-gpu-out}"
mkdir -p "$out"
read -r -a variants <<<"${ENV_VARIANTS:?ENV_VARIANTS=\"NAME=VALUE ...\"}"
status=0
for round in $(seq 1 "${ROUNDS:-1}"); do
  for setting in "${variants[@]}"; do
    [[ "$setting" == *=* ]] || { echo "serve_env_ab: $setting is not NAME=VALUE" >&2; exit 2; }
    name="r${round}_${setting//[^A-Za-z0-9_]/_}"
    wrapper="$(realpath "$out")/$name.sh"
    printf '#!/usr/bin/env bash\nexport %q\nexec %q "$@"\n' "$setting" "$exe" >"$wrapper"
    chmod +x "$wrapper"
    echo "== serve_env_ab: round $round, base_* = $setting"
    SYNCS="${SYNCS:-0}" OUT="$out/$name" BASE_EXE="$wrapper" BASE_MODES="${BASE_MODES:-${MODES:-plain draft}}" \
      bash "$here/serve_load.sh" || status=1
  done
done
python3 - "$out" <<'PY' || status=1
import glob, json, os, sys
rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "r*_*", "serve_load.json"))):
    run = os.path.basename(os.path.dirname(path))
    for r in json.load(open(path))["rows"]:
        if not r["mode"].startswith("syncs_"):
            rows.setdefault((r["mode"], r["clients"]), {})[run] = r
runs = sorted({run for v in rows.values() for run in v})
print("== serve_env_ab: tokens/s (tokens a round) by run: " + ", ".join(runs))
for (mode, clients), by_run in sorted(rows.items(), key=lambda x: (x[0][1], x[0][0])):
    cells = [f"{by_run[r]['tokens_per_s']:,.0f} ({by_run[r]['tokens_per_round'] or 0:.2f})" if r in by_run else "-" for r in runs]
    print(f"{clients:>4} {mode:<16} " + " | ".join(cells))
for (mode, clients), by_run in sorted(rows.items(), key=lambda x: (x[0][1], x[0][0])):
    if "scv" not in mode:
        continue
    ratios = []
    for r, row in by_run.items():
        best = max((rows[(m, clients)][r]["tokens_per_s"] for m, c in rows
                    if c == clients and (m == "plain" or m.startswith("draft_g")) and r in rows[(m, clients)]), default=0)
        if best > 0:
            ratios.append(row["tokens_per_s"] / best)
    if ratios:
        print(f"{clients:>4} {mode:<16} vs the better of plain and the best fixed gamma, each run: "
              + ", ".join(f"{x:.2f}x" for x in ratios))
PY
exit $status
