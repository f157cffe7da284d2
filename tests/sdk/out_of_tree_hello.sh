#!/bin/sh
# Installs the SDK component of a specpipe build into a fresh prefix, builds
# examples/plugins/hello out of tree against it, and loads the result with the engine's
# loader (hello_load_test).
#   out_of_tree_hello.sh <cmake> <specpipe build dir> <source dir> <work dir> <hello_load_test> <c++ compiler>
set -eu
cmake=$1 build=$2 src=$3 work=$4 loader=$5 cxx=$6
prefix=$work/prefix
rm -rf "$work"
mkdir -p "$work"

echo "== install the sdk component into $prefix"
"$cmake" --install "$build" --component sdk --prefix "$prefix" >"$work/install.log"
# Exactly the SDK, nothing else of the engine.
(cd "$prefix" && find . -type f | sed 's|^\./||' | sed 's|^lib[^/]*/cmake/|LIBDIR/cmake/|' | sort) >"$work/installed.txt"
cat >"$work/expected.txt" <<'LIST'
LIBDIR/cmake/specpipeSDK/specpipeSDKConfig.cmake
LIBDIR/cmake/specpipeSDK/specpipeSDKConfigVersion.cmake
LIBDIR/cmake/specpipeSDK/specpipeSDKPlugin.cmake
LIBDIR/cmake/specpipeSDK/specpipeSDKTargets.cmake
include/specpipe/plugin.h
include/specpipe/plugin.hpp
LIST
if ! diff -u "$work/expected.txt" "$work/installed.txt"; then
  echo "FAIL: the sdk component installed other files than expected" >&2
  exit 1
fi

echo "== configure and build examples/plugins/hello against it"
"$cmake" -S "$src/examples/plugins/hello" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS=-Werror -DCMAKE_BUILD_TYPE=Debug >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; echo "FAIL: configure" >&2; exit 1; }
"$cmake" --build "$work/build" -j2 >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; echo "FAIL: build" >&2; exit 1; }
so=$work/build/libspecpipe_hello.so
[ -f "$so" ] || { echo "FAIL: $so was not built" >&2; exit 1; }
# It found the installed SDK, not the source tree.
grep -q "specpipeSDK_DIR:PATH=$prefix/" "$work/build/CMakeCache.txt" ||
  { echo "FAIL: specpipeSDK was not found under $prefix" >&2; exit 1; }

echo "== exported symbols"
if command -v nm >/dev/null 2>&1; then
  symbols=$(nm -D --defined-only "$so" | awk '{print $NF}' | sort | tr '\n' ' ')
  echo "$symbols"
  [ "$symbols" = "specpipe_plugin_entry " ] ||
    { echo "FAIL: the plugin must export specpipe_plugin_entry only" >&2; exit 1; }
fi

echo "== load it with the engine's loader"
SPECPIPE_PLUGIN_PATH=$work/build "$loader" "$so" "$src/examples/plugins/hello/hello.yaml"
