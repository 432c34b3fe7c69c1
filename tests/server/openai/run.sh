#!/usr/bin/env bash
# Runs the node tests against a pagellm binary: run.sh PATH/TO/pagellm
# Installs the pinned `openai` npm package into this folder on first use (npm registry, by name).
set -euo pipefail
cd "$(dirname "$0")"
export PAGELLM_BIN="${1:?usage: run.sh PATH/TO/pagellm}"
if [ ! -f node_modules/openai/package.json ]; then
  npm install --no-audit --no-fund --no-package-lock --loglevel=error
fi
exec node --test --test-concurrency=1 ./*.test.mjs
