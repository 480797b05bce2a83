#!/usr/bin/env bash
# kvwb against llama.cpp on the same GGUF files: prefill (pp) and decode (tg) tokens/s and each
# process's peak resident memory (VmHWM), the two engines alternating, ROUNDS rounds, medians;
# prints the markdown table of docs/engine.md ("Quantised weights"). llama.cpp is built outside
# the repository and never committed; point LLAMA_BENCH at its llama-bench. kvwb reports its own
# peak (bench --json: peak_rss_bytes); llama-bench's is measured with GNU time (/usr/bin/time,
# Debian package "time"), "-" without it. Both decode the same way: GEN tokens after a prompt of
# PROMPT (llama-bench -d PROMPT; kvwb bench decodes after its prefill), into a KV cache of the same
# type (--kv, default f16, llama.cpp's default: kvwb --kv-dtype, llama-bench -ctk/-ctv). A
# measurement tool, never run by the tests.
#
#   LLAMA_BENCH=~/llama.cpp/build/bin/llama-bench packaging/bench-llama.sh \
#       [--threads 1,2] [--rounds 3] [--prompt 128] [--gen 32] [--kv f16|bf16|f32] [--kvwb PATH] \
#       [--kvwb-args "--dtype bf16"] FILE.gguf...
set -euo pipefail

THREADS=1,2
ROUNDS=3
PROMPT=128
GEN=32
KV=f16
KVWB="${KVWB:-$(dirname "$0")/../build/kvwb}"
FILES=()
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --prompt) PROMPT="$2"; shift 2 ;;
    --gen) GEN="$2"; shift 2 ;;
    --kv) KV="$2"; shift 2 ;;
    --kvwb) KVWB="$2"; shift 2 ;;
    --kvwb-args) read -r -a EXTRA <<<"$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) FILES+=("$1"); shift ;;
  esac
done
if [ -z "${LLAMA_BENCH:-}" ] || [ ! -x "$LLAMA_BENCH" ]; then
  echo "bench-llama.sh: set LLAMA_BENCH to llama.cpp's llama-bench (built outside the repository)" >&2
  exit 2
fi
if [ ! -x "$KVWB" ]; then
  echo "bench-llama.sh: no kvwb at $KVWB (--kvwb PATH)" >&2
  exit 2
fi
if [ "${#FILES[@]}" -eq 0 ]; then
  echo "bench-llama.sh: no GGUF file given" >&2
  exit 2
fi
command -v jq >/dev/null || { echo "bench-llama.sh: needs jq" >&2; exit 2; }
TIME=""
[ -x /usr/bin/time ] && TIME=/usr/bin/time

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b + 0 == 0 || a == "nan" || b == "nan") print "-"; else printf "%.2f", a / b}'; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "| file | threads | kvwb pp$PROMPT | llama pp$PROMPT | ratio | kvwb tg$GEN | llama tg$GEN | ratio | kvwb VmHWM GB | llama VmHWM GB | ratio |"
echo "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
IFS=, read -r -a threadList <<<"$THREADS"
for f in "${FILES[@]}"; do
  for t in "${threadList[@]}"; do
    : >"$tmp/kpp"; : >"$tmp/ktg"; : >"$tmp/kmem"; : >"$tmp/lpp"; : >"$tmp/ltg"; : >"$tmp/lmem"
    for _ in $(seq "$ROUNDS"); do
      "$KVWB" bench "$f" --threads "$t" --lengths "$PROMPT" --decode-tokens "$GEN" --repeats 1 --json \
        --kv-dtype "$KV" ${EXTRA[@]+"${EXTRA[@]}"} >"$tmp/k.json" 2>/dev/null
      jq -r '.rows[0].prefill_tok_s' "$tmp/k.json" >>"$tmp/kpp"
      jq -r '.rows[0].decode_tok_s' "$tmp/k.json" >>"$tmp/ktg"
      jq -r '.peak_rss_bytes / 1e9' "$tmp/k.json" >>"$tmp/kmem"
      # prefill from an empty cache, then decode after PROMPT positions: two runs, the larger peak
      peak=0
      for args in "-p $PROMPT -n 0" "-p 0 -n $GEN -d $PROMPT"; do
        read -r -a largs <<<"$args"
        if [ -n "$TIME" ]; then
          "$TIME" -f "%M" -o "$tmp/lt" "$LLAMA_BENCH" -m "$f" -t "$t" "${largs[@]}" -ctk "$KV" -ctv "$KV" -r 1 \
            -o json >"$tmp/l.json" 2>/dev/null
          peak=$(awk -v p="$peak" '{print ($1 > p ? $1 : p)}' "$tmp/lt")
        else
          "$LLAMA_BENCH" -m "$f" -t "$t" "${largs[@]}" -ctk "$KV" -ctv "$KV" -r 1 -o json >"$tmp/l.json" 2>/dev/null
        fi
        jq -r '.[] | select(.n_prompt > 0) | .avg_ts' "$tmp/l.json" >>"$tmp/lpp"
        jq -r '.[] | select(.n_gen > 0) | .avg_ts' "$tmp/l.json" >>"$tmp/ltg"
      done
      [ -n "$TIME" ] && awk -v p="$peak" 'BEGIN {print p * 1024 / 1e9}' >>"$tmp/lmem"
    done
    kpp=$(median <"$tmp/kpp"); lpp=$(median <"$tmp/lpp"); ktg=$(median <"$tmp/ktg"); ltg=$(median <"$tmp/ltg")
    kmem=$(median <"$tmp/kmem"); lmem=$(median <"$tmp/lmem")
    printf '| %s | %s | %.1f | %.1f | %s | %.1f | %.1f | %s | %.2f | %s | %s |\n' "$(basename "$f")" "$t" \
      "$kpp" "$lpp" "$(ratio "$kpp" "$lpp")" "$ktg" "$ltg" "$(ratio "$ktg" "$ltg")" "$kmem" \
      "$( [ "$lmem" = nan ] && echo - || printf '%.2f' "$lmem")" "$(ratio "$kmem" "$lmem")"
  done
done
