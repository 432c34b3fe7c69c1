#!/usr/bin/env bash
# Installs pagellm's build dependencies (Debian 12 packages) and builds build/pagellm.
# Usage: scripts/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config   # toolchain
  libgtest-dev libgmock-dev                      # unit tests
  libbenchmark-dev                               # micro-benchmarks
  libpcre2-dev                                   # tokenizer pre-tokenizer regexes (Unicode properties)
  nlohmann-json3-dev                             # JSON (CLI --json, golden data)
  libcli11-dev                                   # command-line parsing
  libxxhash-dev                                  # prefix-cache block hashes (XXH3)
  clang libclang-rt-14-dev                       # libFuzzer target (optional), sanitizer runtime
  clang-format clang-tidy                        # scripts/lint.sh
  libboost-dev                                   # HTTP server and client: Boost.Beast + Asio (header-only)
)
# Node.js + npm run the API compatibility tests with the official `openai` npm client (optional for
# a build, required by CI); the machine image may already ship them (outside dpkg's view of the
# Debian packages), so only add if absent.
command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
