#!/usr/bin/env bash
# Installs the Debian packages specpipe builds against, only when one is missing.
# Every dependency comes from Debian's own archive (see docs/DEPENDENCIES.md).
#   scripts/install-deps.sh [--fuzz]    --fuzz: also what scripts/fuzz.sh needs (clang, lld,
#                                       clang's sanitizer and libFuzzer runtimes)
set -euo pipefail
fuzz=0
[ "${1:-}" != --fuzz ] || fuzz=1

packages=(
  build-essential cmake pkg-config
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev
  libpcre2-dev libutf8proc-dev libxxhash-dev libdlpack-dev libopenblas-dev
  libcaf-dev libzmq3-dev cppzmq-dev libboost-dev
  libgtest-dev libbenchmark-dev python3-zmq
  curl python3-venv
)

[ $fuzz = 0 ] || packages+=(clang lld)

updated=0
install_missing() {  # installs those of the named packages that are missing
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "install-deps: installing ${missing[*]}" >&2
  local sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  [ $updated = 1 ] || "${sudo_cmd[@]}" apt-get update -qq
  updated=1
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

install_missing "${packages[@]}"
# -fsanitize=fuzzer,address,undefined links clang's runtimes, a package of clang's own
# version (libclang-rt-14-dev on Debian 12) that clang only recommends.
[ $fuzz = 0 ] || install_missing "libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev"
