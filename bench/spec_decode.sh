#!/usr/bin/env bash
# Speculative decoding, single stream, measured with `pagellm generate`
# (one process per prompt, greedy, the same prompts with and without speculation):
#   1. acceptance: per model in --accept-models (TARGET, or TARGET=DRAFT for a draft model), k = --k fixed (--no-speculative-adaptive), the
#      rate at each draft position (accepted there / drafts, vLLM's definition), the mean
#      accepted length (1 + accepted / drafts) and the per-token acceptance a that gives that
#      length under the i.i.d. model ((1 - a^(k+1)) / (1 - a));
#   2. speed on --speed-model: decode tokens/s without speculation, with fixed k and with the
#      adaptive k, and the ratios; next to it the expected speedup (1 - a^(k+1)) / ((1 - a) V),
#      V = the verify cost: the step time of k + 1 tokens over that of 1 token, measured with
#      `bench latency --prompt-tokens`, and c the draft cost (~0 for n-gram lookup; with
#      --draft-model D, D's single-stream decode time over the target's, from `bench latency`),
#      expected = (1 - a^(k+1)) / ((1 - a)(k c + V)).
# --proposer "FLAGS": the proposer's flags (default --speculative-ngram; e.g.
# "--speculative-self-layers 4"); --draft-model D sets it to --speculative-model D for part 2.
# Prompts: per story of the "eval" split of ../shared/testdata/tinystories/ending-choice.jsonl
# (stories 100-199 of valid-sample.txt), its shortest context (its first sentences, cut to at most
# 600 characters at a sentence end): 100 prompts;
# the first --speed-prompts of them for part 2.
#
#   bench/spec_decode.sh [--accept-models "M1 M2=D2"] [--speed-model M] [--proposer FLAGS]
#       [--draft-model D] [--k 4] [--gen-tokens 128]
#       [--speed-prompts 10] [--threads 2] [--bin build/pagellm] [--testdata ../shared/testdata]
set -euo pipefail
cd "$(dirname "$0")/.."

accept_models="models/stories260K-f32.gguf"
speed_model=""
proposer="--speculative-ngram"
draft_model=""
k=4
gen=128
speed_prompts=10
threads=2
bin=build/pagellm
testdata=../shared/testdata
while [[ $# -gt 0 ]]; do
  case "$1" in
    --accept-models) accept_models="$2"; shift 2 ;;
    --speed-model) speed_model="$2"; shift 2 ;;
    --proposer) proposer="$2"; shift 2 ;;
    --draft-model) draft_model="$2"; proposer="--speculative-model $2"; shift 2 ;;
    --k) k="$2"; shift 2 ;;
    --gen-tokens) gen="$2"; shift 2 ;;
    --speed-prompts) speed_prompts="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --testdata) testdata="$2"; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "spec_decode.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$bin" ]] || { echo "spec_decode.sh: $bin not built" >&2; exit 2; }
jsonl="$testdata/tinystories/ending-choice.jsonl"
[[ -f "$jsonl" ]] || { echo "spec_decode.sh: $jsonl not found (--testdata)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$jsonl" "$work/prompts" <<'EOF'
import json, sys
seen = set()
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        j = json.loads(line)
        story = j["id"].rsplit("-", 1)[0]  # tsend-<story>-<k>: the first (shortest) context per story
        if j["split"] == "eval" and story not in seen:
            seen.add(story)
            # At most 600 characters, cut after a sentence: prompt + 128 tokens fit the 512-token
            # context of the small models (their 512-token vocabulary spends ~2 bytes a token).
            c = j["context"]
            if len(c) > 600:
                cut = max(c.rfind(". ", 0, 600), c.rfind("! ", 0, 600), c.rfind("? ", 0, 600))
                c = c[: cut + 1] if cut > 0 else c[:600]
            out.write(json.dumps(c) + "\n")
EOF

# run MODEL N OUT ARGS...: generate for the first N prompts, one JSON line each into OUT.
run() {
  local model=$1 n=$2 out=$3
  shift 3
  : > "$out"
  head -n "$n" "$work/prompts" | while IFS= read -r p; do
    "$bin" generate -m "$model" -p "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]))' "$p")" \
      -n "$gen" --temp 0 --ignore-eos -t "$threads" --json "$@" >> "$out"
  done
}

summary() {  # summary FILE K -> markdown cells
  python3 - "$1" "$2" <<'EOF'
import json, sys
k = int(sys.argv[2])
drafts = draft_tokens = accepted = 0
per_pos = [0] * k
tokens = seconds = 0.0
for line in open(sys.argv[1]):
    t = json.loads(line)["timings"]
    s = t["spec_decode"]
    drafts += s["num_drafts"]; draft_tokens += s["num_draft_tokens"]; accepted += s["num_accepted_tokens"]
    for i, v in enumerate(s["num_accepted_tokens_per_pos"][:k]): per_pos[i] += v
    tokens += t["decode_tokens"]; seconds += t["decode_ms"] / 1e3
mal = 1 + accepted / drafts if drafts else 1.0
# a with (1 - a^(k+1)) / (1 - a) = mal, by bisection (monotone in a).
lo, hi = 0.0, 1.0
for _ in range(60):
    a = (lo + hi) / 2
    if sum(a ** i for i in range(k + 1)) < mal: lo = a
    else: hi = a
rates = " / ".join(f"{v / drafts:.2f}" if drafts else "-" for v in per_pos)
print(f"{drafts}|{draft_tokens}|{accepted}|{rates}|{mal:.2f}|{lo:.2f}|{tokens / seconds:.2f}")
EOF
}

num_prompts=$(wc -l < "$work/prompts")
label="proposer \`$proposer\`"
[[ "$accept_models" == *=* ]] && label="proposer \`$proposer\`; TARGET=DRAFT rows: a draft model"
echo "## Acceptance, $label (k = $k fixed, greedy, $gen tokens, $num_prompts prompts)"
echo
echo "| model | drafts | draft tokens | accepted | acceptance per position | mean accepted length | a |"
echo "| --- | ---: | ---: | ---: | --- | ---: | ---: |"
for entry in $accept_models; do
  m=${entry%%=*}
  # the proposer's flags are words
  if [[ "$entry" == *=* ]]; then flags=(--speculative-model "${entry#*=}"); else read -r -a flags <<< "$proposer"; fi
  run "$m" "$num_prompts" "$work/acc.jsonl" "${flags[@]}" --no-speculative-adaptive --num-speculative-tokens "$k"
  IFS='|' read -r d dt acc rates mal a _ <<< "$(summary "$work/acc.jsonl" "$k")"
  [[ "$entry" == *=* ]] && m="$m with draft $(basename "${entry#*=}")"
  echo "| $(basename "$m") | $d | $dt | $acc | $rates | $mal | $a |"
done
[[ -n "$speed_model" ]] || exit 0

echo
echo "## Single stream on $(basename "$speed_model") ($speed_prompts prompts, $gen tokens, $threads threads)"
echo
# Verify cost: step time of n tokens (a prefill of n) over one token's.
"$bin" bench latency -m "$speed_model" --prompt-tokens 1 --gen-tokens 2 -t "$threads" --json > "$work/v1.json"
ms='import json,sys; j=json.load(open(sys.argv[1])); print(1e3 * j["prompt_tokens"] / j["prefill_tokens_per_s"])'
one=$(python3 -c "$ms" "$work/v1.json")
"$bin" bench latency -m "$speed_model" --prompt-tokens $((k + 1)) --gen-tokens 2 -t "$threads" --json > "$work/vk.json"
kms=$(python3 -c "$ms" "$work/vk.json")
c=0
if [[ -n "$draft_model" ]]; then  # c: the draft's decode step over the target's
  dms='import json,sys; j=json.load(open(sys.argv[1])); print(1e3 / j["decode_tokens_per_s"])'
  "$bin" bench latency -m "$speed_model" --prompt-tokens 16 --gen-tokens 64 -t "$threads" --json > "$work/t.json"
  "$bin" bench latency -m "$draft_model" --prompt-tokens 16 --gen-tokens 64 -t "$threads" --json > "$work/d.json"
  c=$(python3 -c "print($(python3 -c "$dms" "$work/d.json") / $(python3 -c "$dms" "$work/t.json"))")
fi
# shellcheck disable=SC2086
run "$speed_model" "$speed_prompts" "$work/off.jsonl"
# shellcheck disable=SC2086
run "$speed_model" "$speed_prompts" "$work/fixed.jsonl" $proposer --no-speculative-adaptive --num-speculative-tokens "$k"
# shellcheck disable=SC2086
run "$speed_model" "$speed_prompts" "$work/adaptive.jsonl" $proposer --num-speculative-tokens "$k"
IFS='|' read -r _ _ _ _ _ _ off <<< "$(summary "$work/off.jsonl" "$k")"
IFS='|' read -r _ _ _ rates mal a fixed <<< "$(summary "$work/fixed.jsonl" "$k")"
IFS='|' read -r _ _ _ _ amal _ adaptive <<< "$(summary "$work/adaptive.jsonl" "$k")"
python3 - "$off" "$fixed" "$adaptive" "$a" "$k" "$one" "$kms" "$mal" "$amal" "$c" "$proposer" <<'EOF'
import sys
off, fixed, adaptive, a, k = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
one, kms, mal, amal, c, name = sys.argv[6], sys.argv[7], sys.argv[8], sys.argv[9], float(sys.argv[10]), sys.argv[11]
v = float(kms) / float(one)
expected = (sum(a ** i for i in range(k + 1))) / (k * c + v)
print(f"verify cost V(k={k}) = step({k + 1} tokens) / step(1 token) = {float(kms):.1f} / {float(one):.1f} ms = {v:.2f}; draft cost c = {c:.2f}")
print()
print("| | decode tokens/s | vs off | mean accepted length |")
print("| --- | ---: | ---: | ---: |")
print(f"| off | {off:.2f} | 1.00x | - |")
print(f"| `{name}`, k = {k} fixed | {fixed:.2f} | {fixed / off:.2f}x | {mal} |")
print(f"| `{name}`, adaptive k <= {k} | {adaptive:.2f} | {adaptive / off:.2f}x | {amal} |")
print(f"| expected at a = {a:.2f}, k = {k}: (1 - a^(k+1)) / ((1 - a)(k c + V)) | | {expected:.2f}x | |")
EOF
