#!/usr/bin/env bash
# Checks that every `#include "folder/..."` under src/ is allowed by the layer table in
# docs/design.md ("## Layers"): a file may include headers of its own folder, of the folders its
# row lists under "may include", and of those its row in the exceptions table lists.
# Usage: scripts/check_layers.sh [root [table]]: checks root/src (default: this repository)
# against `table` (default: root/docs/design.md). Exit 0 when all includes obey, 1 (listing each
# offending file:line) otherwise, 2 when the table cannot be read or a folder has no row.
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
doc="${2:-$root/docs/design.md}"
[[ -f "$doc" ]] || { echo "check_layers: $doc not found" >&2; exit 2; }

# The "## Layers" section up to the next "## ": table rows whose first cell is `name`.
section=$(awk '/^## Layers/{on=1; next} /^## /{on=0} on' "$doc")
declare -A allowed   # folder -> " a b c "  (may include)
declare -A extra     # src/path/file -> " a b "  (exceptions)
while IFS= read -r line; do
  [[ "$line" =~ ^\|\ \`([^\`]+)\`\ \|([^|]*)\|([^|]*)\| ]] || continue
  key="${BASH_REMATCH[1]}"
  if [[ "$key" == src/* ]]; then
    cell="${BASH_REMATCH[2]}"          # exceptions: | `src/file` | `a`, `b` | why |
    extra["$key"]=" $({ grep -o '`[^`]*`' <<<"$cell" || true; } | tr -d '`' | tr '\n' ' ') "
  else
    cell="${BASH_REMATCH[3]}"          # layers: | `folder` | owns | `a`, `b` |
    allowed["$key"]=" $({ grep -o '`[^`]*`' <<<"$cell" || true; } | tr -d '`' | tr '\n' ' ') "
  fi
done <<<"$section"
[[ ${#allowed[@]} -gt 0 ]] || { echo "check_layers: no layer rows in $doc" >&2; exit 2; }

# The folder (a table key) a path under src/ belongs to: the longest key that prefixes it.
folder_of() {
  local p="$1" best=""
  for k in "${!allowed[@]}"; do
    if [[ "$p" == "$k/"* && ${#k} -gt ${#best} ]]; then best="$k"; fi
  done
  echo "$best"
}

status=0
cd "$root/src"
while IFS= read -r file; do
  own=$(folder_of "$file")
  if [[ -z "$own" ]]; then
    [[ "$file" == */* ]] || continue   # src/main.cc: the program, above every layer
    echo "src/$file: its folder has no row in the layer table ($doc)"
    status=2
    continue
  fi
  while IFS=: read -r lineno inc; do
    target=$(folder_of "$inc")
    [[ -z "$target" || "$target" == "$own" ]] && continue
    [[ "${allowed[$own]}" == *" $target "* ]] && continue
    [[ "${extra[src/$file]:-}" == *" $target "* ]] && continue
    echo "src/$file:$lineno: includes \"$inc\": layer '$own' may not include '$target' (docs/design.md, Layers)"
    [[ $status -eq 0 ]] && status=1
  done < <(grep -no '^#include "[^"]*"' "$file" | sed 's/#include "\(.*\)"/\1/')
done < <(find . -name '*.h' -o -name '*.cc' | sed 's|^\./||' | sort)
[[ $status -eq 0 ]] && echo "check_layers: every include under src/ obeys docs/design.md's layer table"
exit $status
