#!/usr/bin/env bash
# Style and static checks: clang-format (.clang-format) and clang-tidy (.clang-tidy) over src/ and
# tests/. .ci/run runs it after the tests, on the build it made; a finding fails CI.
# Usage: scripts/lint.sh [--fix] [build-dir]
#   build-dir: a configured build with compile_commands.json (default: build; configured if absent)
#   --fix:     rewrite the files with clang-format instead of reporting (clang-tidy never edits)
# Exit status: 0 when both are clean, 1 otherwise. Debian: clang-format, clang-tidy (14).
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
if [ "${1:-}" = "--fix" ]; then fix=1; shift; fi
build=${1:-build}
mapfile -t files < <(git ls-files 'src/*.cc' 'src/*.h' 'tests/*.cc' 'tests/*.h' 2>/dev/null ||
                     find src tests -name '*.cc' -o -name '*.h')
status=0
mkdir -p "$build"

echo "== clang-format ($(clang-format --version | grep -o '[0-9][0-9.]*' | head -1)), ${#files[@]} files"
if ((fix)); then
  clang-format -i --style=file "${files[@]}"
else
  clang-format --dry-run --Werror --style=file "${files[@]}" 2>"$build/clang-format.log" || status=1
  echo "$(grep -c 'clang-format-violations' "$build/clang-format.log" || true) places to reformat (details: $build/clang-format.log)"
fi

echo "== clang-tidy ($(clang-tidy --version | grep -o '[0-9][0-9.]*' | head -1)), checks from .clang-tidy"
[ -f "$build/compile_commands.json" ] ||
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGELLM_BUILD_BENCH=OFF >/dev/null
mapfile -t sources < <(printf '%s\n' "${files[@]}" | grep '\.cc$' | grep -v '^tests/fuzz/')
# One process per file, in parallel; headers of src/ are checked through the files that include them.
printf '%s\n' "${sources[@]}" |
  xargs -P"$(nproc)" -n1 clang-tidy -p "$build" --quiet --warnings-as-errors='*' >"$build/clang-tidy.log" 2>/dev/null ||
  status=1
echo "$(grep -c ' warning: \| error: ' "$build/clang-tidy.log" || true) findings (details: $build/clang-tidy.log)"
exit $status
