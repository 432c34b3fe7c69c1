#!/usr/bin/env bash
# Builds (if needed) and runs every test with CTest. Golden data is read from ../shared/testdata.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || scripts/setup.sh
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
