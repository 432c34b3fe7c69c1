#!/usr/bin/env bash
# Prefix caching on vs off, measured with `pagellm bench serve`: for each workload (shared-prefix,
# multi-turn) the same seeded benchmark runs against a fresh server with prefix caching (default)
# and a fresh one with --no-prefix-caching, back to back; prints a markdown table of TTFT and
# throughput and their on/off ratios. Servers are stopped on exit.
#
#   bench/prefix_cache.sh -m MODEL [--prefix-len 1000] [--input-len 100] [--output-len 32]
#       [--num-prompts 16] [--concurrency 4] [--num-turns 4] [--mt-output-len 64] [--port 8393]
#       [--threads 2] [--kv-cache-memory 2000blocks] [--bin build-bench/pagellm] [--run-timeout 600]
#       [--json-dir DIR]
set -euo pipefail

model=""
prefix_len=1000
input_len=100
output_len=32
num_prompts=16
conc=4
turns=4
mt_output_len=64
port=8393
threads=2
kv_mem=2000blocks
bin=""
run_timeout=600
json_dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m|--model) model="$2"; shift 2 ;;
    --prefix-len) prefix_len="$2"; shift 2 ;;
    --input-len) input_len="$2"; shift 2 ;;
    --output-len) output_len="$2"; shift 2 ;;
    --num-prompts) num_prompts="$2"; shift 2 ;;
    --concurrency) conc="$2"; shift 2 ;;
    --num-turns) turns="$2"; shift 2 ;;
    --mt-output-len) mt_output_len="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --kv-cache-memory) kv_mem="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --run-timeout) run_timeout="$2"; shift 2 ;;
    --json-dir) json_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "prefix_cache.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "$model" ]] || { echo "prefix_cache.sh: -m MODEL is required" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "$bin" ]]; then
  for b in "$root/build-bench/pagellm" "$root/build/pagellm"; do [[ -x "$b" ]] && { bin="$b"; break; }; done
fi
[[ -x "$bin" ]] || { echo "prefix_cache.sh: no pagellm binary (pass --bin)" >&2; exit 2; }
"$bin" serve --help | grep -q -- --no-prefix-caching || { echo "prefix_cache.sh: $bin serve has no --no-prefix-caching" >&2; exit 2; }
work="$(mktemp -d)"
[[ -n "$json_dir" ]] || json_dir="$work"
mkdir -p "$json_dir"

server_pid=""
stop_server() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
trap 'stop_server; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

start_server() {  # $@: extra serve flags
  "$bin" serve -m "$model" --host 127.0.0.1 --port "$port" --threads "$threads" --max-num-seqs 64 \
    --kv-cache-memory "$kv_mem" --drain-timeout 1 "$@" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.1
  done
  # Warm-up with an unrelated short prompt (shares no block with the workloads).
  timeout "$run_timeout" "$bin" bench serve --base-url "http://127.0.0.1:$port" --num-prompts 1 --input-len 16 \
    --output-len 4 --seed 999 --no-progress --json >/dev/null
}

rows=()
for workload in shared-prefix multi-turn; do
  for mode in on off; do
    flags=()
    [[ $mode == off ]] && flags=(--no-prefix-caching)
    start_server "${flags[@]}"
    args=(--dataset-name "$workload" --input-len "$input_len" --num-prompts "$num_prompts" --max-concurrency "$conc")
    if [[ $workload == shared-prefix ]]; then
      args+=(--prefix-len "$prefix_len" --output-len "$output_len")
    else
      args+=(--num-turns "$turns" --output-len "$mt_output_len")
    fi
    out="$json_dir/$workload-$mode.json"
    echo "[$(date +%T)] $workload, prefix caching $mode" >&2
    if timeout "$run_timeout" "$bin" bench serve --base-url "http://127.0.0.1:$port" "${args[@]}" --seed 1 --json \
        --no-progress >"$out"; then
      rows+=("$workload $mode $out")
    else
      rows+=("$workload $mode TIMEOUT")
    fi
    stop_server
  done
done

echo
echo "model: $(basename "$model"), --threads $threads, $(nproc) CPUs, $(date -u +%F)"
echo
python3 - "${rows[@]}" <<'EOF'
import json, sys
a = sys.argv[1:]
rows = {tuple(r.split()[:2]): r.split()[2] for r in a}  # "workload mode json-or-TIMEOUT"
def load(p):
    return None if p == "TIMEOUT" else json.load(open(p))
print("| workload | prefix cache | requests | mean prompt tokens | mean cached tokens | mean TTFT (ms) | median TTFT (ms) | output tok/s | total tok/s |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for (w, m), p in rows.items():
    j = load(p)
    if j is None:
        print(f"| {w} | {m} | timed out | | | | | | |")
        continue
    mc = "n/a" if j["mean_cached_tokens"] is None else f"{j['mean_cached_tokens']:.0f}"
    n = max(j["completed"], 1)
    print(f"| {w} | {m} | {j['completed']}/{j['completed'] + j['failed']} | {j['total_input_tokens'] / n:.0f} | {mc} | "
          f"{j['mean_ttft_ms']:.0f} | {j['median_ttft_ms']:.0f} | {j['output_throughput']:.1f} | {j['total_token_throughput']:.1f} |")
print()
print("| workload | TTFT off / on (mean) | TTFT off / on (median) | output throughput on / off |")
print("| --- | ---: | ---: | ---: |")
for w in ("shared-prefix", "multi-turn"):
    on, off = load(rows.get((w, "on"), "TIMEOUT")), load(rows.get((w, "off"), "TIMEOUT"))
    if on is None or off is None or on["mean_ttft_ms"] <= 0 or off["output_throughput"] <= 0:
        print(f"| {w} | n/a | n/a | n/a |")
        continue
    print(f"| {w} | {off['mean_ttft_ms'] / on['mean_ttft_ms']:.2f}x | {off['median_ttft_ms'] / on['median_ttft_ms']:.2f}x | "
          f"{on['output_throughput'] / off['output_throughput']:.2f}x |")
EOF
