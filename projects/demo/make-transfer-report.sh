#!/usr/bin/env bash
# Reproduces the numbers of docs/transfer-report.md on the demo pair: capture calibration text,
# fit converters in several configurations, sweep k x lambda x calibration tokens, compare B from
# scratch with B from A's converted cache on held-out questions, and time conversion vs prefill.
# Then the converter families (low-rank, MLP) against ridge on the same data, and, when the demo has
# them, the unrelated pair (A -> B2, B2 trained on the other half of the corpus from another seed)
# and the cross-tokenizer pair (C -> B); the hardest pairs (part `hard`: U -> B, tokenizers that
# cross, and A -> D, a character-level target) with and without B's token features; the KL objective
# (part `kl`: the maps trained through B) on the demo pair and A -> D; prompts whose answer the context
# states (part `context`: names, numbers, facts); last (part `defaults`), every
# pair with no fit flags at all (family auto) and the selective-recompute curve.
# Usage: projects/demo/make-transfer-report.sh [path/to/kvwb]   (about 90 minutes on 2 cores, most of
# it the MLP fits)
# KVWB_REPORT_PARTS="base families unrelated" runs only those parts (default: all of them).
set -euo pipefail
# shellcheck source=demo-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo-env.sh" "$@" # HERE, KVWB, WORK
OUT="$WORK/transfer"
mkdir -p "$OUT"
[ -f "$WORK/corpus.jsonl" ] || "$KVWB" corpus wordnet --out "$WORK/corpus.jsonl" --concepts 1000 --seed 1

PARTS="${KVWB_REPORT_PARTS:-base families unrelated crosstok hard kl context defaults}"
want() { [[ " $PARTS " == *" $1 "* ]]; }
EXP="$OUT/demo-transfer.h5"

# compare NAME on the 150 held-out questions into compare-<tag>.json; extra flags follow
compare150() {
  local exp="$1" conv="$2" tag="$3"; shift 3
  "$KVWB" compare --experiment "$exp" --converter "$conv" --prompts "$WORK/corpus.jsonl" --split validation \
    --limit 150 --max-tokens 24 --json "$@" > "$OUT/compare-$tag.json" 2> "$OUT/compare-$tag.log"
  python3 - "$OUT/compare-$tag.json" "$tag" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
g = s["baselines"]["kl_gap_closed_vs_no_prefix"]
print(f"{sys.argv[2]}: KL {s['kl']:.4f} (no prefix {s['kl_no_prefix']:.4f}), top-1 {s['top1']:.3f} "
      f"(no prefix {s['top1_no_prefix']:.3f}), KL gap closed {g['estimate']:.3f} [{g['lo']:.3f}, {g['hi']:.3f}]")
PY
}

# align EXP NAME flags...: fit and store one converter, print its one-line summary
align_in() {
  local exp="$1" name="$2"; shift 2
  "$KVWB" align --experiment "$exp" --name "$name" --replace "$@" --json > "$OUT/align-$name.json"
  python3 - "$OUT/align-$name.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
mean = lambda k: sum(l[k] for l in j["layers"] if l[k] is not None) / len(j["layers"])
print(f"{j['converter']}: {j['family']}, R2 K {mean('r2_k'):.3f}, R2 V {mean('r2_v'):.3f}, "
      f"attn cos {mean('attn_cos'):.3f}, {j['parameters']} parameters, fit {j['fit_seconds']:.1f} s, "
      f"{j['convert_ms_per_1k']:.2f} ms per 1k tokens")
PY
}
align() { align_in "$EXP" "$@"; }

# capture_pair EXP A B NAME [JOIN LIMIT]: models/A -> models/B on 600 calibration sequences of 4
# training documents (question + answer) each into EXP, its summary into NAME.json; a character-level
# model (512 characters of context) takes 1,200 sequences of 2, the same text
capture_pair() {
  local exp="$1" a="$2" b="$3" name="$4" join="${5:-4}" limit="${6:-600}"
  "$KVWB" capture --model-a "$HERE/models/$a" --model-b "$HERE/models/$b" --prompts "$WORK/corpus.jsonl" \
    --split train --whole-text --join "$join" --limit "$limit" --out "$exp" --json > "$OUT/$name.json"
}

if want base || [ ! -f "$EXP" ]; then
rm -f "$EXP"
echo "== capture: 600 calibration sequences of 4 training documents (question + answer) each"
capture_pair "$EXP" a b capture
cat "$OUT/capture.json"
fi

if want base; then
echo "== align: one converter per configuration"
align prop-k1 --select proportional --k 1 --lambda auto --family ridge
align prop-k1-head --select proportional --k 1 --lambda auto --per-head --family ridge
align topk-k2 --select topk --k 2 --lambda auto --family ridge
align all --select all --lambda auto --family ridge
align all-head --select all --lambda auto --per-head --family ridge

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
fi

if want families; then
echo "== converter families on the demo pair (same capture, split and held-out questions)"
want base || align all --select all --lambda auto --family ridge
compare150 "$EXP" all all --baselines
align lowrank-16 --select all --lambda auto --family low-rank --rank 16
align lowrank-64 --select all --lambda auto --family low-rank --rank 64
align mlp --select all --lambda auto --family mlp
for c in lowrank-16 lowrank-64 mlp; do compare150 "$EXP" "$c" "$c"; done
compare150 "$EXP" mlp mlp-vs-all --versus all --baselines
align mlp-h64 --select all --lambda auto --family mlp --hidden 64
compare150 "$EXP" mlp-h64 mlp-h64-vs-all --versus all
# conversion cost, one thread each, one after another (run it on a quiet machine)
for f in "ridge" "low-rank --rank 64" "mlp --hidden 256" "mlp --hidden 64" "mlp --hidden 16"; do
  # shellcheck disable=SC2086
  "$KVWB" bench-transfer --k 4 --lengths 512 --threads 1 --family $f | tee "$OUT/bench-transfer-$(echo "$f" | tr -d ' -').md"
done
fi

if want unrelated && [ -d "$HERE/models/b2" ]; then
echo "== the unrelated pair: A -> B2 (B2: another seed, the other half of the corpus)"
EXP2="$OUT/demo-unrelated.h5"
rm -f "$EXP2"
capture_pair "$EXP2" a b2 capture-unrelated
for cfg in "u-all --select all --lambda auto --family ridge" "u-lowrank-64 --select all --lambda auto --family low-rank --rank 64" \
           "u-mlp --select all --lambda auto --family mlp"; do
  set -- $cfg
  name="$1"; shift
  align_in "$EXP2" "$name" "$@"
  compare150 "$EXP2" "$name" "$name" --baselines
done
compare150 "$EXP2" u-mlp u-mlp-vs-all --versus u-all --baselines
fi

if want crosstok && [ -d "$HERE/models/c" ]; then
echo "== the cross-tokenizer pair: C (its own tokenizer) -> B, B's rows paired with C's through the alignment"
EXP3="$OUT/demo-crosstok.h5"
rm -f "$EXP3"
capture_pair "$EXP3" c b capture-crosstok
align_in "$EXP3" x-all --select all --lambda auto --family ridge
compare150 "$EXP3" x-all x-all --baselines
align_in "$EXP3" x-mlp --select all --lambda auto --family mlp
compare150 "$EXP3" x-mlp x-mlp-vs-x-all --versus x-all --baselines
fi

if want hard && [ -d "$HERE/models/u" ] && [ -d "$HERE/models/d" ]; then
echo "== the hardest pairs: U -> B (tokenizers that cross: unigram against BPE) and A -> D (a character-level"
echo "   target): ridge on every A layer, the same with B's token features, the MLP from each, and the defaults"
for pair in "crossing u b 4 600" "chars a d 2 1200"; do
  set -- $pair
  EXPH="$OUT/hard-$1.h5"
  [ -f "$EXPH" ] || capture_pair "$EXPH" "$2" "$3" "capture-hard-$1" "$4" "$5"
  align_in "$EXPH" h-all --select all --lambda auto --family ridge
  compare150 "$EXPH" h-all "hard-$1-all" --baselines
  align_in "$EXPH" h-all-tf --select all --lambda auto --family ridge --token-features all
  compare150 "$EXPH" h-all-tf "hard-$1-all-tf" --versus h-all --baselines
  align_in "$EXPH" h-mlp-tf --select all --lambda auto --family mlp --token-features all
  compare150 "$EXPH" h-mlp-tf "hard-$1-mlp-tf" --versus h-all-tf --baselines
  "$KVWB" align --experiment "$EXPH" --name defaults --replace > "$OUT/align-hard-$1-defaults.md" \
    2> "$OUT/align-hard-$1-defaults.log"
  tr '\r' '\n' < "$OUT/align-hard-$1-defaults.log" | grep '^auto:' || true
  compare150 "$EXPH" defaults "hard-$1-defaults" --baselines
  "$KVWB" compare --experiment "$EXPH" --converter defaults --prompts "$WORK/corpus.jsonl" --split validation \
    --limit 150 --max-tokens 24 --recompute-curve --threads 1 | tee "$OUT/recompute-curve-hard-$1.md"
done
fi

if want kl; then
echo "== training through B (--objective kl): ridge on every A layer with B's token features (the KV fit),"
echo "   then the same with its maps trained on B's next-token KL, compared on the held-out questions"
for pair in "demo $EXP" "chars $OUT/hard-chars.h5"; do
  set -- $pair
  [ -f "$2" ] || continue
  align_in "$2" kv-tf --select all --lambda auto --family ridge --token-features all
  compare150 "$2" kv-tf "kl-$1-kv" --baselines
  align_in "$2" kl-tf --select all --lambda auto --family ridge --token-features all --objective kl
  python3 - "$OUT/align-kl-tf.json" <<'PY'
import json, sys
k = json.load(open(sys.argv[1]))["kl"]
print(f"validation KL {k['valid_kl_kv_fit']:.4f} -> {k['valid_kl']:.4f} (no prefix {k['valid_kl_no_prefix']:.4f}), "
      f"epoch {k['best_epoch']} of {k['epochs']}, {k['seconds']:.0f} s")
PY
  compare150 "$2" kl-tf "kl-$1-kl" --versus kv-tf --baselines
done
fi

if want context; then
echo "== context that decides the answer (kvwb corpus context): names, numbers and facts stated earlier in"
echo "   the prompt, on the demo pair with the defaults (family auto) and the token-feature ridge"
"$KVWB" corpus context --out "$OUT/context-names.jsonl" --kinds names --count 100 --force
"$KVWB" corpus context --out "$OUT/context-numbers.jsonl" --kinds numbers --count 100 --force
# the demo models trained on single Q/A documents of at most 128 tokens: two facts, no distance
"$KVWB" corpus context --out "$OUT/context-facts.jsonl" --kinds facts --count 100 --entities 2 --distance 0 --force
"$KVWB" corpus context --out "$OUT/context-facts-cf.jsonl" --kinds facts --count 100 --entities 2 --distance 0 \
  --counterfactual --force
"$KVWB" align --experiment "$EXP" --name defaults --replace > "$OUT/align-defaults-context.md" 2>&1
align all-tf --select all --lambda auto --family ridge --token-features all
for set in names numbers facts facts-cf; do
  for conv in defaults all-tf; do
    "$KVWB" compare --experiment "$EXP" --converter "$conv" --prompts "$OUT/context-$set.jsonl" --max-tokens 24 \
      --baselines --threads 1 --json > "$OUT/context-$set-$conv.json" 2> "$OUT/context-$set-$conv.log"
    python3 - "$OUT/context-$set-$conv.json" "$set $conv" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
b = s["baselines"]
f = lambda i: f"{i['estimate']:.3f} [{i['lo']:.3f}, {i['hi']:.3f}]"
a = s["answers"]
print(f"{sys.argv[2]}: KL {s['kl']:.4f} (no prefix {s['kl_no_prefix']:.4f}), gap closed {f(b['kl_gap_closed_vs_no_prefix'])}, "
      f"first 8 {f(b['kl_gap_closed_vs_no_prefix_first8'])}, above the destroyed cache "
      f"{f(b['retention_above_destroyed_cache'])}, answer found scratch {a['found_scratch']:.3f} / transfer "
      f"{a['found_transfer']:.3f} / A {a['found_a']:.3f}, transfer - scratch {f(a['transfer_minus_scratch'])}")
PY
  done
done
echo "   the defaults' recompute curve on the held-out questions, with the answers, at both ends and at the end"
for pos in ends recent first; do
  "$KVWB" compare --experiment "$EXP" --converter defaults --prompts "$WORK/corpus.jsonl" --split validation \
    --limit 150 --max-tokens 24 --recompute-curve --recompute-positions "$pos" --threads 1 \
    | tee "$OUT/context-recompute-$pos.md"
done
echo "   calibration on single documents (question and answer) instead of joined fours, the same tokens"
capture_pair "$OUT/single-docs.h5" a b capture-single-docs 1 2400
align_in "$OUT/single-docs.h5" all-tf --select all --lambda auto --family ridge --token-features all
compare150 "$OUT/single-docs.h5" all-tf single-docs-all-tf --baselines
fi

if want defaults; then
echo "== every pair with the defaults: no fit flags (family auto), compared with the baselines, then the"
echo "   recompute curve (ends) of the kept converter"
for pair in "demo a b" "unrelated a b2" "crosstok c b"; do
  set -- $pair
  [ -d "$HERE/models/$3" ] && [ -d "$HERE/models/$2" ] || continue
  EXPD="$OUT/defaults-$1.h5"
  [ -f "$EXPD" ] || capture_pair "$EXPD" "$2" "$3" "capture-defaults-$1"
  "$KVWB" align --experiment "$EXPD" --name defaults --replace > "$OUT/align-defaults-$1.md" 2> "$OUT/align-defaults-$1.log"
  tr '\r' '\n' < "$OUT/align-defaults-$1.log" | grep '^auto:' || true
  grep 'family auto chose' "$OUT/align-defaults-$1.md"
  compare150 "$EXPD" defaults "defaults-$1" --baselines
  "$KVWB" compare --experiment "$EXPD" --converter defaults --prompts "$WORK/corpus.jsonl" --split validation \
    --limit 150 --max-tokens 24 --recompute-curve --threads 1 | tee "$OUT/recompute-curve-$1.md"
done
fi
