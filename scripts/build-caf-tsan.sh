#!/usr/bin/env bash
# Builds CAF 0.17.6's core library (Debian's version, from Debian's own source tarball)
# with -fsanitize=thread into DIR/install, for `scripts/test.sh --tsan`.
#   scripts/build-caf-tsan.sh DIR
# Why: ThreadSanitizer only sees the synchronisation of instrumented code. Debian's
# libcaf_core is not instrumented, so every message handed from one actor thread to
# another (its mailboxes and work-stealing queues are atomics inside the library) reads
# as a data race, hundreds per test. Built here with TSAN (and without CAF's own memory
# pools, which recycle objects behind TSAN's back), only our races remain. Core only:
# ~100 files, a few minutes on 2 cores; done once per build directory.
set -euo pipefail
dir=${1:?usage: build-caf-tsan.sh DIR}
version=0.17.6
sha256=e2bf5bd243f08bb7d8adde197cfe3e6d71314ed3378fe0692f8932f4c3b3928c
jobs=${SPECPIPE_JOBS:-$(nproc)}
[[ -f "$dir/install/lib/libcaf_core.so" ]] && exit 0
mkdir -p "$dir"
tarball="$dir/actor-framework_$version.orig.tar.gz"
if [[ ! -f "$tarball" ]]; then
  curl -fsSL -o "$tarball.part" "http://deb.debian.org/debian/pool/main/a/actor-framework/actor-framework_$version.orig.tar.gz"
  mv "$tarball.part" "$tarball"
fi
echo "$sha256  $tarball" | sha256sum -c --quiet
rm -rf "$dir/src" && mkdir -p "$dir/src"
tar xzf "$tarball" -C "$dir/src" --strip-components=1
flags="-fsanitize=thread -O1 -g1 -w"
cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX="$dir/install" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  -DCAF_NO_IO=yes -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_TOOLS=yes -DCAF_NO_OPENCL=yes \
  -DCAF_NO_OPENSSL=yes -DCAF_NO_PYTHON=yes -DCAF_NO_SUMMARY=yes -DCAF_NO_MEM_MANAGEMENT=yes \
  -DCAF_LOG_LEVEL=QUIET >/dev/null
cmake --build "$dir/build" -j"$jobs"
cmake --install "$dir/build" >/dev/null
