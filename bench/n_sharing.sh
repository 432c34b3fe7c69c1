#!/usr/bin/env bash
# KV memory of parallel sampling (`n: 4`) against 4 separate requests, read from /metrics.
# Starts `pagellm serve`, then (back to back, the engine idle in between):
#   A. one /v1/completions request with n = 4 (temperature 1, seeded), a long prompt, ignore_eos;
#   B. 4 separate concurrent requests (n = 1), each with its own prompt of the same length
#      (distinct words from the first one on, so no block can be shared);
#   C. 4 separate concurrent requests with the same prompt as A (what the prefix cache can share).
# While each case runs, /metrics is polled every 10 ms; the peak of num_blocks - num_free_blocks
# is the most KV blocks the requests held at once. Prints a markdown table; stops the server.
#
#   bench/n_sharing.sh -m MODEL [--prompt-words 1000] [--max-tokens 128] [--port 8392]
#       [--threads 2] [--kv-cache-memory 4000blocks] [--bin build-bench/pagellm] [--serve-args "..."]
set -euo pipefail

model=""
words=1000
max_tokens=128
port=8392
threads=2
kv_mem=4000blocks
bin=""
serve_args=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m|--model) model="$2"; shift 2 ;;
    --prompt-words) words="$2"; shift 2 ;;
    --max-tokens) max_tokens="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --kv-cache-memory) kv_mem="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --serve-args) serve_args="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "n_sharing.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "$model" ]] || { echo "n_sharing.sh: -m MODEL is required" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "$bin" ]]; then
  for b in "$root/build-bench/pagellm" "$root/build/pagellm"; do [[ -x "$b" ]] && { bin="$b"; break; }; done
fi
[[ -x "$bin" ]] || { echo "n_sharing.sh: no pagellm binary (pass --bin)" >&2; exit 2; }
work="$(mktemp -d)"
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

# shellcheck disable=SC2086
"$bin" serve -m "$model" --host 127.0.0.1 --port "$port" --threads "$threads" --kv-cache-memory "$kv_mem" \
  --drain-timeout 1 $serve_args >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done

python3 - "$port" "$words" "$max_tokens" "$(basename "$model")" <<'EOF'
import json, random, sys, threading, time, urllib.request
port, words, max_tokens, model_file = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
base = f"http://127.0.0.1:{port}"
VOCAB = ("the of and to in is you that it he was for on are as with his they at be this have from or one "
         "had by word but not what all were we when your can said there use an each which she do how their "
         "if will up other about out many then them these so some her would make like time").split()

def prompt(seed):
    r = random.Random(seed)
    return " ".join(r.choice(VOCAB) for _ in range(words))

def metrics():
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    vals = {}
    for line in text.splitlines():
        if line.startswith("pagellm:num_blocks") or line.startswith("pagellm:num_free_blocks"):
            name = line.split("{")[0].split(" ")[0]
            vals[name] = float(line.rsplit(" ", 1)[1])
    return int(vals["pagellm:num_blocks"]), int(vals["pagellm:num_free_blocks"])

def complete(body, out, i):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    out[i] = json.loads(urllib.request.urlopen(req, timeout=900).read())

def case(bodies):
    # Wait (bounded) for an idle engine, run the bodies concurrently, poll the pool meanwhile.
    for _ in range(500):
        total, free = metrics()
        if free == total:
            break
        time.sleep(0.01)
    out = [None] * len(bodies)
    ts = [threading.Thread(target=complete, args=(b, out, i)) for i, b in enumerate(bodies)]
    t0 = time.time()
    for t in ts: t.start()
    peak = 0
    for _ in range(90000):  # <= 15 min of polls
        total, free = metrics()
        peak = max(peak, total - free)
        if not any(t.is_alive() for t in ts):
            break
        time.sleep(0.01)
    for t in ts: t.join()
    dt = time.time() - t0
    prompt_tokens = out[0]["usage"]["prompt_tokens"]
    completion = sum(o["usage"]["completion_tokens"] for o in out)
    cached = [o["usage"].get("prompt_tokens_details", {}) or {} for o in out]
    cached = sum(c.get("cached_tokens", 0) for c in cached) if any("cached_tokens" in c for c in cached) else None
    return peak, prompt_tokens, completion, cached, dt, total

common = dict(model=None, max_tokens=max_tokens, ignore_eos=True, temperature=1.0)
models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=10).read())
common["model"] = models["data"][0]["id"]
p0 = prompt(1)
cases = [
    ("one request, `n: 4`", [dict(common, prompt=p0, n=4, seed=7)]),
    ("4 requests, different prompts", [dict(common, prompt=prompt(100 + i), seed=7 + i) for i in range(4)]),
    ("4 requests, same prompt", [dict(common, prompt=p0, seed=7 + i) for i in range(4)]),
]
rows = []
for name, bodies in cases:
    rows.append((name,) + case(bodies))
total = rows[0][6]
print(f"model: {model_file}, prompt {words} words, max_tokens {max_tokens}, pool {total} blocks of 16 tokens")
print()
print("| case | prompt tokens | completion tokens (all 4) | cached prompt tokens (usage) | peak KV blocks held | vs 4 different prompts | wall s |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
ref = rows[1][1]
for name, peak, pt, comp, cached, dt, _ in rows:
    c = "n/a" if cached is None else str(cached)
    print(f"| {name} | {pt} | {comp} | {c} | {peak} | {peak / ref:.2f} | {dt:.1f} |")
EOF
