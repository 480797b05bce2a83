#!/usr/bin/env bash
# Reproduces the numbers of docs/transfer-report.md on the demo pair: capture calibration text,
# fit converters in several configurations, sweep k x lambda x calibration tokens, compare B from
# scratch with B from A's converted cache on held-out questions, and time conversion vs prefill.
# Usage: projects/demo/make-transfer-report.sh [path/to/kvwb]   (about 15 minutes on 2 cores)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KVWB="${1:-$HERE/../../build/kvwb}"
WORK="${KVWB_DEMO_WORK:-$HERE/../../build/demo-work}"
OUT="$WORK/transfer"
mkdir -p "$OUT"
[ -f "$WORK/corpus.jsonl" ] || "$KVWB" corpus wordnet --out "$WORK/corpus.jsonl" --concepts 1000 --seed 1

EXP="$OUT/demo-transfer.h5"
rm -f "$EXP"
echo "== capture: 600 calibration sequences of 4 training documents (question + answer) each"
"$KVWB" capture --model-a "$HERE/models/a" --model-b "$HERE/models/b" --prompts "$WORK/corpus.jsonl" \
  --split train --whole-text --join 4 --limit 600 --out "$EXP" --json > "$OUT/capture.json"
cat "$OUT/capture.json"

echo "== align: one converter per configuration"
align() { # name, then flags
  local name="$1"; shift
  "$KVWB" align --experiment "$EXP" --name "$name" "$@" --json > "$OUT/align-$name.json"
  "$KVWB" align --experiment "$EXP" --name "$name" "$@" --dry-run 2>/dev/null | sed -n '1,20p'
}
align prop-k1 --select proportional --k 1 --lambda auto
align prop-k1-head --select proportional --k 1 --lambda auto --per-head
align topk-k2 --select topk --k 2 --lambda auto
align all --select all --lambda auto
align all-head --select all --lambda auto --per-head

echo "== sweeps"
"$KVWB" sweep --experiment "$EXP" --name k-lambda --select topk --k 1,2,3,4 --lambda 1e-4,1e-3,1e-2,1e-1,1 \
  | tee "$OUT/sweep-k-lambda.md"
"$KVWB" sweep --experiment "$EXP" --name tokens --select all --lambda 1e-2 \
  --tokens 500,2000,8000,32000,all | tee "$OUT/sweep-tokens.md"
"$KVWB" sweep --experiment "$EXP" --name tokens-head --select all --per-head --lambda 1e-2 \
  --tokens 500,2000,8000,32000,all | tee "$OUT/sweep-tokens-head.md"

echo "== compare on 150 held-out questions (validation phrasings, never in the calibration set)"
for c in prop-k1 prop-k1-head topk-k2 all all-head; do
  "$KVWB" compare --experiment "$EXP" --converter "$c" --prompts "$WORK/corpus.jsonl" --split validation \
    --limit 150 --max-tokens 24 --json > "$OUT/compare-$c.json" 2> "$OUT/compare-$c.log"
  echo "$c: $OUT/compare-$c.json"
done

echo "== conversion vs prefill"
"$KVWB" bench-transfer | tee "$OUT/bench-transfer.md"
"$KVWB" bench-transfer --k 4 | tee "$OUT/bench-transfer-k4.md"
"$KVWB" bench-transfer --preset-a 10m --preset-b 10m | tee "$OUT/bench-transfer-10m.md"
