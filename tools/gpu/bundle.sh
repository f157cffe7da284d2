#!/usr/bin/env bash
# Builds the GPU tools here and packs them for the GPU machine:
#   gpu-bundle/bin/  the executables, stripped: the GPU tools (specpipe_cuda_check,
#                    specpipe_gpu_generate, specpipe_specpv_gpu), the `specpipe` command and the engine suites
#                    engine_check.sh runs on the device
#   gpu-bundle/lib/  the non-system shared libraries they need (fmt, CAF, ...), from ldd
#   gpu-bundle/plugins/  the strategy plugins and the test's faulty ones (SPECPIPE_PLUGIN_DIR)
#   gpu-bundle.tar.xz  all of it compressed: what travels (the tree sent to the GPU
#                    machine is capped at 64 MiB and the models take 45); bundle_env.sh
#                    unpacks it there
# Left out: what every Linux has (libc, libm, libstdc++, libgcc_s, ld-linux, ...) and
# what the GPU machine's CUDA 13 provides (libcuda, libcudart, libcublas*, libnvidia*).
# Then, on the GPU machine, from the repository root: bash tools/gpu/check.sh (kernels)
# and bash tools/gpu/bench.sh (demo pair on the GPU + Hugging Face, JSON), or
# bash tools/gpu/graph_bench.sh (synthetic 8B / 0.6B models, CUDA graphs, JSON).
#
# Usage: tools/gpu/bundle.sh            (build dir: $SPECPIPE_GPU_BUILD or build-gpu;
#        bundle name: $SPECPIPE_BUNDLE or gpu-bundle, so engineers sharing a checkout each
#        pack their own: SPECPIPE_BUNDLE=gpu-bundle-x makes gpu-bundle-x.tar.xz, and the
#        scripts on the GPU machine read it with the same SPECPIPE_BUNDLE)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${SPECPIPE_GPU_BUILD:-$root/build-gpu}"
name="${SPECPIPE_BUNDLE:-gpu-bundle}"
bundle="$root/$name"
jobs="${SPECPIPE_JOBS:-1}"
tools=(specpipe_cuda_check specpipe_gpu_generate specpipe speculative_golden_test concurrent_requests_test
       speculative_property_test plugin_pipeline_test rope_scaling_golden_test offload_engine_test
       specpipe_specpv_gpu specpv_test specpv_long_test)
plugins=(specpipe_nwor specpipe_scv specpipe_specpv specpipe_faulty_plugin specpipe_faulty_abi_plugin
         specpipe_faulty_no_entry_plugin)
# SPECPIPE_BUNDLE_TOOLS="a b ..." builds and packs only those tools (the plugins always).
if [[ -n "${SPECPIPE_BUNDLE_TOOLS:-}" ]]; then read -r -a tools <<<"$SPECPIPE_BUNDLE_TOOLS"; fi
# SPECPIPE_BUNDLE_PLUGINS="a b ..." packs only those plugins (the faulty ones are test
# targets: a build without tests has none); SPECPIPE_BUNDLE_BENCH=ON keeps the bench/
# targets (bench/load_generator for tools/gpu/serve_load.sh).
if [[ -n "${SPECPIPE_BUNDLE_PLUGINS:-}" ]]; then read -r -a plugins <<<"$SPECPIPE_BUNDLE_PLUGINS"; fi

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECPIPE_CUDA=ON \
  -DSPECPIPE_BUILD_BENCH="${SPECPIPE_BUNDLE_BENCH:-OFF}" >/dev/null
nice cmake --build "$build" -j"$jobs" --target "${tools[@]}" "${plugins[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/plugins"
for p in "${plugins[@]}"; do
  lib="$(find "$build" -type f -name "lib$p.so" | head -n1)"
  [[ -n "$lib" ]] || { echo "bundle: lib$p.so was not built" >&2; exit 1; }
  strip -s -o "$bundle/plugins/lib$p.so" "$lib"
done
system_lib='^(linux-vdso|libc\.|libm\.|libstdc\+\+|libgcc_s|ld-linux|libdl\.|librt\.|libpthread\.|libcuda\.|libcudart|libcublas|libnvidia|libnvrtc)'
for t in "${tools[@]}"; do
  exe="$(find "$build" -type f -name "$t" -perm -u+x | head -n1)"
  [[ -n "$exe" ]] || { echo "bundle: $t was not built" >&2; exit 1; }
  strip -s -o "$bundle/bin/$t" "$exe"
  # "libfmt.so.9 => /lib/x86_64-linux-gnu/libfmt.so.9 (0x...)": keep name and path.
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    if [[ ! "$name" =~ $system_lib ]]; then cp -L "$path" "$bundle/lib/$name"; fi
  done
done
git -C "$root" rev-parse --short HEAD >"$bundle/COMMIT" 2>/dev/null || true
rm -f "$bundle.tar.xz"
# xz -9: a 64 MiB dictionary spans the binaries, which share most of their code (the
# engine is linked into each): three tools pack to ~7 MB where xz's default -6 (8 MiB
# dictionary) gave 16 MB.
tar -C "$root" -cf - "$name" | xz -9 -T2 >"$bundle.tar.xz"
echo "bundle: $(du -sh "$bundle" | cut -f1) in $bundle, $(du -sh "$bundle.tar.xz" | cut -f1) packed"
ls -l "$bundle/bin" "$bundle/lib"
