#!/usr/bin/env bash
# pagellm vs llama.cpp on the same GGUF files, same thread count, back to back (issue 5).
# llama.cpp is never part of this repository: build its llama-bench yourself outside it, e.g.
#   cmake -S llama.cpp -B lb -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
#         [-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON ...] && cmake --build lb --target llama-bench
# (GGML_NATIVE=ON also enables AMX on CPUs that report it; on VMs that do not grant the AMX
# state llama-bench then dies with SIGILL.)
#
#   bench/vs_llamacpp.sh --llama-bench PATH [--threads 2] [--reps 3] [--bin build/pagellm] MODEL...
#
# Per model: llama-bench -p 512 -n 128 -t T -r R (pp512, tg128 from an empty context), then
# pagellm bench latency --prompt-tokens 512 --gen-tokens 128 --batch 1,16 (decode after the
# 512-token prompt) and --prompt-tokens 1 --gen-tokens 128 (decode from an empty context, as
# tg128). Prints one markdown row per model with the ratios.
set -euo pipefail
llama_bench=""
threads=2
reps=3
bin=""
models=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --llama-bench) llama_bench="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) models+=("$1"); shift ;;
  esac
done
[[ -x "$llama_bench" ]] || { echo "error: --llama-bench PATH (an executable llama-bench) is required" >&2; exit 2; }
[[ ${#models[@]} -gt 0 ]] || { echo "error: give at least one GGUF model" >&2; exit 2; }
if [[ -z "$bin" ]]; then bin="$(cd "$(dirname "$0")/.." && pwd)/build/pagellm"; fi
[[ -x "$bin" ]] || { echo "error: pagellm binary not found at $bin (build first or pass --bin)" >&2; exit 2; }

json_field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

echo "| model | llama.cpp pp512 | pagellm pp512 | ratio | llama.cpp tg128 | pagellm tg128 (empty ctx) | ratio | pagellm tg after 512 | B=16 / B=1 | probe GB/s | bytes x tg / probe |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for m in "${models[@]}"; do
  lj="$("$llama_bench" -m "$m" -p 512 -n 128 -t "$threads" -r "$reps" -o json 2>/dev/null)"
  lpp="$(echo "$lj" | json_field '[r["avg_ts"] for r in d if r["n_prompt"]>0][0]')"
  ltg="$(echo "$lj" | json_field '[r["avg_ts"] for r in d if r["n_gen"]>0][0]')"
  pj="$("$bin" bench latency -m "$m" --prompt-tokens 512 --gen-tokens 128 --batch 1,16 --threads "$threads" --json 2>/dev/null)"
  ppp="$(echo "$pj" | json_field 'd["prefill_tokens_per_s"]')"
  ptg512="$(echo "$pj" | json_field 'd["decode_tokens_per_s"]')"
  b16="$(echo "$pj" | json_field 'd["batch_decode_tokens_per_s"]["16"] / d["batch_decode_tokens_per_s"]["1"]')"
  ej="$("$bin" bench latency -m "$m" --prompt-tokens 1 --gen-tokens 128 --threads "$threads" --json 2>/dev/null)"
  ptg="$(echo "$ej" | json_field 'd["decode_tokens_per_s"]')"
  bw="$(echo "$ej" | json_field 'd["bandwidth_gb_per_s"]')"
  frac="$(echo "$ej" | json_field 'd["bandwidth_fraction"]')"
  python3 - "$m" "$lpp" "$ppp" "$ltg" "$ptg" "$ptg512" "$b16" "$bw" "$frac" <<'PY'
import os, sys
m, lpp, ppp, ltg, ptg, ptg512, b16, bw, frac = sys.argv[1], *map(float, sys.argv[2:])
print(f"| {os.path.basename(m)} | {lpp:.1f} | {ppp:.1f} | {ppp/lpp:.2f}x | {ltg:.1f} | {ptg:.1f} | {ptg/ltg:.2f}x "
      f"| {ptg512:.1f} | {b16:.2f}x | {bw:.1f} | {frac:.2f} |")
PY
done
