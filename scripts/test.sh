#!/usr/bin/env bash
# Builds everything with warnings as errors and runs the test suites.
#   scripts/test.sh              unit + golden suites (what CI runs)
#   scripts/test.sh --slow       also the `slow` label
#   scripts/test.sh --sanitize   the unit suites under AddressSanitizer + UBSan (the golden
#                                suites run the same code paths, ~10x slower under ASan; they
#                                are not even built there, tests/CMakeLists.txt)
#   scripts/test.sh --tsan       the actor, engine and endpoint suites under ThreadSanitizer,
#                                two actor threads included (build-tsan/; see below)
# Labels: unit, golden, slow, cuda (tests/CMakeLists.txt).
# SPECPIPE_UNITY_BUILD=OFF compiles every source file on its own (see below).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${SPECPIPE_JOBS:-$(nproc)}
labels='unit|golden'
# Test processes run in parallel: one kernel thread each keeps the cores from being
# oversubscribed (tests that need several threads ask for them explicitly).
export SPECPIPE_THREADS=${SPECPIPE_THREADS:-1}
build="$root/build-test"
# Unity builds: CMake compiles each target's .cpp files #included together, 8 to a
# source, so the heavy headers (CAF, CLI11, gtest, nlohmann/json, spdlog) are parsed and
# their templates compiled once per batch instead of once per file. On 2 cores this took
# the plain build from ~1,130 to ~620-740 CPU seconds (two measurements) and the
# sanitizer build from ~1,500 to ~850. The price: two .cpp files of one target may not
# define file-local helpers of the same name, and a class with linkage may not hold a type
# of an anonymous namespace (GCC's -Wsubobject-linkage); .cu files are never merged, and
# specpipe_model_cuda opts out (model/cuda/CMakeLists.txt). A file that forgets an
# #include can compile here thanks to the file before it: SPECPIPE_UNITY_BUILD=OFF builds
# each file alone.
unity=${SPECPIPE_UNITY_BUILD:-ON}
extra=()
# Under the sanitizers the property matrices (every gamma x batch x strategy, minutes
# each at ASan speed) are skipped: they check outputs, which the plain pass does; the
# same code paths run under ASan in the shorter actor, plugin and endpoint tests.
# So are the chi-square tests of speculative sampling (acceptance_stats_test.cpp:
# AcceptanceStats.*, ToyExactness, DemoFirstToken; 200k draws each, ~2 CPU minutes in
# all under ASan): they test a distribution, which the plain pass does; accept_sampling
# and the sampling kernels run under ASan in AcceptSampling.*, PlainGenerator's and
# ConcurrentRequests' sampled requests and examples.pipeline.sampling.
sanitize_skip='SpeculativeProperty|StrategyMatrix|AcceptanceStats|ToyExactness|DemoFirstToken'
skip='^$'
# ThreadSanitizer: only the suites where threads meet (the actors on CAF's threads, the
# engine's blocking queries, the endpoint's socket thread), not everything: a TSAN build of
# all targets is heavy on 2 cores. CAF is rebuilt with TSAN (scripts/build-caf-tsan.sh), else its
# uninstrumented mailboxes hide the ordering of every message from TSAN.
tsan_targets=(actor_threads_test concurrent_requests_test round_protocol_test endpoint_test micro_batches_test)
tsan_tests='^(ActorThreads|ConcurrentRequests|EndpointTest|MicroBatches)\.|^actors\.round_protocol$'
tsan=0
for arg in "$@"; do
  case "$arg" in
    --slow) labels='unit|golden|slow' ;;
    --sanitize) labels='unit'; build="$root/build-asan"; skip="$sanitize_skip"
                # CUDA is compiled by the plain pass; without a GPU ASan has nothing of it to run.
                # -O1 -g1: the sanitizers' usual level with line tables only; on 2 cores the
                # build took ~11.5 min instead of ~18 at -O2, the tests ~8 min instead of ~5.
                extra+=(-DSPECPIPE_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPECPIPE_BUILD_BENCH=OFF
                        -DSPECPIPE_CUDA=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
                        "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1") ;;
    --tsan) tsan=1; labels='unit'; build="$root/build-tsan"; skip='^$'
            extra+=(-DSPECPIPE_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPECPIPE_BUILD_BENCH=OFF
                    -DSPECPIPE_CUDA=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
                    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1"
                    "-DCAF_INCLUDE_DIR=$build/caf/install/include"
                    "-DCAF_CORE_LIBRARY=$build/caf/install/lib/libcaf_core.so") ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

"$root/scripts/install-deps.sh"
if [[ $tsan == 1 ]]; then
  "$root/scripts/build-caf-tsan.sh" "$build/caf"
  cmake -S "$root" -B "$build" -DSPECPIPE_WERROR=ON -DCMAKE_UNITY_BUILD="$unity" "${extra[@]}" >/dev/null
  cmake --build "$build" -j"$jobs" --target "${tsan_targets[@]}"
  # halt_on_error: a race fails its test at once. OpenBLAS's own threads are not
  # instrumented: one BLAS thread.
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp}
  export OPENBLAS_NUM_THREADS=1
  cd "$build" && exec ctest -L unit -R "$tsan_tests" --output-on-failure -j"$jobs" --timeout 900
fi
cmake -S "$root" -B "$build" -DSPECPIPE_WERROR=ON -DCMAKE_UNITY_BUILD="$unity" "${extra[@]}" >/dev/null
cmake --build "$build" -j"$jobs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build" && ctest -L "$labels" -E "$skip" --output-on-failure -j"$jobs" --timeout 900
