#!/usr/bin/env bash
# Installs the Debian packages specpipe builds against, only when one is missing.
# Every dependency comes from Debian's own archive (see docs/DEPENDENCIES.md).
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev
  libpcre2-dev libutf8proc-dev libxxhash-dev libdlpack-dev libopenblas-dev
  libcaf-dev libzmq3-dev cppzmq-dev libboost-dev
  libgtest-dev libbenchmark-dev python3-zmq
  curl python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
