#!/usr/bin/env bash
# Output tokens/s vs concurrency for `pagellm serve` (continuous batching), measured with
# `pagellm bench serve`: starts one server, runs one fixed-concurrency benchmark per level
# (back to back, after a warm-up request), stops the server and prints a markdown table in which
# every throughput is also given as a ratio to concurrency 1 (one request at a time).
# With --serial-baseline it then restarts the server with --max-num-seqs 1 and runs the highest
# concurrency again: the same offered load served one request at a time. --server-args passes
# more flags to `pagellm serve` (e.g. "--max-step-ms 500"). --llama-server PATH measures
# llama.cpp's llama-server instead, with the same client: restarted for each level with -np C
# (C slots of (input-len + output-len) x 2 tokens of context each) and continuous batching.
# --request-rate "R ..." adds open-loop runs: requests arrive as a seeded Poisson process of R
# requests/s (no cap on requests in flight), --rate-prompts of them per rate, against a server with
# max(concurrency levels) sequences (llama-server: that many slots).
# llama-server's connections leave TIME_WAIT sockets without SO_REUSEADDR, so for about a minute
# after it stops no server can bind that port: give the next run another --port.
#
#   bench/serve_sweep.sh -m /tmp/tinyllama-q4_0.gguf [--concurrency "1 4 16 64"] [--input-len 32]
#       [--output-len 32] [--prompts-per-level 2] [--min-prompts 4] [--port 8391] [--threads 2]
#       [--kv-cache-memory 256MiB] [--max-num-batched-tokens 512] [--bin build/pagellm]
#       [--run-timeout 600] [--serial-baseline] [--json-dir DIR] [--server-args "ARGS"]
#       [--llama-server PATH] [--request-rate "R ..."] [--rate-prompts 64]
#
# Each level sends max(prompts-per-level * C, min-prompts) requests of input-len random words and
# output-len tokens (ignore_eos); each run draws its prompts from a seed of its own (1, 2, ... in
# run order), so no run finds an earlier run's prompts in a server's prefix cache. All traffic
# goes to 127.0.0.1. Every run is bounded by --run-timeout seconds (a run that times out is
# reported as such, the sweep goes on).
set -euo pipefail

model=""
levels="1 4 16 64"
input_len=32
output_len=32
per_level=2
min_prompts=4
port=8391
threads=2
kv_mem=256MiB
batched=512
bin=""
run_timeout=600
serial=0
json_dir=""
server_args=""
llama_server=""
rates=""
rate_prompts=64
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m|--model) model="$2"; shift 2 ;;
    --concurrency) levels="$2"; shift 2 ;;
    --input-len) input_len="$2"; shift 2 ;;
    --output-len) output_len="$2"; shift 2 ;;
    --prompts-per-level) per_level="$2"; shift 2 ;;
    --min-prompts) min_prompts="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --kv-cache-memory) kv_mem="$2"; shift 2 ;;
    --max-num-batched-tokens) batched="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --run-timeout) run_timeout="$2"; shift 2 ;;
    --serial-baseline) serial=1; shift ;;
    --json-dir) json_dir="$2"; shift 2 ;;
    --server-args) server_args="$2"; shift 2 ;;
    --llama-server) llama_server="$2"; shift 2 ;;
    --request-rate) rates="$2"; shift 2 ;;
    --rate-prompts) rate_prompts="$2"; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "serve_sweep.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "$model" ]] || { echo "serve_sweep.sh: -m MODEL is required" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "$bin" ]]; then
  for b in "$root/build-bench/pagellm" "$root/build/pagellm"; do [[ -x "$b" ]] && { bin="$b"; break; }; done
fi
[[ -x "$bin" ]] || { echo "serve_sweep.sh: no pagellm binary (pass --bin)" >&2; exit 2; }
work="$(mktemp -d)"
[[ -n "$json_dir" ]] || json_dir="$work"
mkdir -p "$json_dir"
max_c=1
for c in $levels; do (( c > max_c )) && max_c=$c; done

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

start_server() {  # $1 = max-num-seqs (pagellm) or slots (llama-server)
  if [[ -n "$llama_server" ]]; then
    "$llama_server" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" -np "$1" \
      -c $(( $1 * 2 * (input_len + output_len) )) -cb -b "$batched" >"$work/server.log" 2>&1 &
  else
    # shellcheck disable=SC2086  # server_args is a list of flags
    "$bin" serve -m "$model" --host 127.0.0.1 --port "$port" --threads "$threads" --max-num-seqs "$1" \
      --max-num-batched-tokens "$batched" --kv-cache-memory "$kv_mem" --max-waiting 4096 --drain-timeout 1 \
      $server_args >"$work/server.log" 2>&1 &
  fi
  server_pid=$!
  for _ in $(seq 1 600); do  # up to 60 s to load the model
    if curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1; then break; fi
    kill -0 "$server_pid" 2>/dev/null || { echo "server exited:" >&2; cat "$work/server.log" >&2; exit 1; }
    sleep 0.1
  done
  curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null || { echo "server not up after 60 s" >&2; exit 1; }
  # Warm-up: page the weights in and run every kernel once; not measured.
  timeout "$run_timeout" "$bin" bench serve --base-url "http://127.0.0.1:$port" --num-prompts 1 \
    --input-len "$input_len" --output-len 4 --no-progress --json >/dev/null
}

# $1 = label, $2 = concurrency, $3 = max-num-seqs of the server; appends "label c n json" to rows.
rows=()
run_level() {
  local c="$2" n=$(( per_level * $2 ))
  (( n < min_prompts )) && n=$min_prompts
  run_bench "$1" "$c" "$3" "$json_dir/$1-c$c.json" "concurrency $c, $n requests" --num-prompts "$n" \
    --max-concurrency "$c"
}
# $1 = label, $2 = rate (requests/s), $3 = max-num-seqs of the server.
run_rate() {
  run_bench "$1" "rate=$2" "$3" "$json_dir/$1-r$2.json" "Poisson rate $2/s, $rate_prompts requests" \
    --num-prompts "$rate_prompts" --request-rate "$2"
}
# $1 label, $2 load (concurrency or rate=R), $3 max-num-seqs, $4 json path, $5 log text, rest: bench args.
run_seed=0
run_bench() {
  local label="$1" load="$2" seqs="$3" out="$4"
  run_seed=$(( run_seed + 1 ))
  echo "[$(date +%T)] $label: $5" >&2
  shift 5
  if timeout "$run_timeout" "$bin" bench serve --base-url "http://127.0.0.1:$port" "$@" \
      --input-len "$input_len" --output-len "$output_len" --seed "$run_seed" --json --no-progress >"$out"; then
    rows+=("$label $load $seqs $out")
  else
    rows+=("$label $load $seqs TIMEOUT")
  fi
}

if [[ -n "$llama_server" ]]; then
  for c in $levels; do
    start_server "$c"
    run_level batched "$c" "$c"
    stop_server
  done
  if [[ -n "$rates" ]]; then
    start_server "$max_c"
    for r in $rates; do run_rate batched "$r" "$max_c"; done
    stop_server
  fi
else
  start_server "$max_c"
  for c in $levels; do run_level batched "$c" "$max_c"; done
  for r in $rates; do run_rate batched "$r" "$max_c"; done
  stop_server
fi
if (( serial )); then
  start_server 1
  run_level serial "$max_c" 1
  stop_server
fi

echo
server_name="pagellm serve $server_args"
[[ -n "$llama_server" ]] && server_name="llama-server -np C"
echo "server: $server_name; model: $(basename "$model"), input $input_len words, output $output_len tokens, --threads $threads, $(nproc) CPUs, $(date -u +%F)"
echo
python3 - "${rows[@]}" <<'EOF'
import json, sys
args = sys.argv[1:]
rows = [a.split() for a in args]  # "label concurrency max-num-seqs json-or-TIMEOUT"
base = None
for label, c, seqs, path in rows:
    if label == "batched" and c == "1" and path != "TIMEOUT":
        base = json.load(open(path))["output_throughput"]
print("| server `--max-num-seqs` | concurrency or Poisson rate (req/s) | requests | output tok/s | vs concurrency 1 | mean TTFT (ms) | "
      "p50 / p99 TTFT (ms) | mean TPOT (ms) | p50 / p99 ITL (ms) | failed |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for label, c, seqs, path in rows:
    if path == "TIMEOUT":
        print(f"| {seqs} | {c} | | timed out | | | | | | |")
        continue
    j = json.load(open(path))
    ratio = f"{j['output_throughput'] / base:.2f}x" if base else "n/a"
    print(f"| {seqs} | {c} | {j['completed'] + j['failed']} | {j['output_throughput']:.2f} | {ratio} | "
          f"{j['mean_ttft_ms']:.0f} | {j['median_ttft_ms']:.0f} / {j['p99_ttft_ms']:.0f} | {j['mean_tpot_ms']:.0f} | "
          f"{j['median_itl_ms']:.0f} / {j['p99_itl_ms']:.0f} | {j['failed']} |")
EOF
