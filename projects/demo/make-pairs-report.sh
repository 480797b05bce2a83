#!/usr/bin/env bash
# Reproduces the "Learning from labelled pairs" table of docs/cache-tiers.md: an embedder and a
# cross-encoder verifier trained on public paraphrase sets other than Quora's (every *.tsv of
# PAIRS_DIR: text<TAB>text<TAB>label, e.g. MRPC's training split, STS-B's training pairs scored >= 4 /
# <= 2, SICK, SemEval's question-question pairs), then judged on Quora's question pairs, held out
# entirely: 1,000 pairs (500 duplicates, 500 not, Python's random.Random(SEED)) sampled from
# GPTCache's labelled file (examples/benchmark/similiar_qqp_full.json from its repository, a JSON
# array of {text_a, text_b, label}), and with FULL=1 the whole file. Nothing is tuned on Quora:
# each threshold is the one the training measured for precision 0.9 on its own validation pairs,
# or a fixed round value. Every replay is the semantic tier alone, one generated token a request,
# one thread; a hit is true when the cached request is the labelled duplicate.
# Trained models are kept in OUT and reused when present (delete them to train again).
# Usage: projects/demo/make-pairs-report.sh [path/to/kvwb] PAIRS_DIR QUORA_JSON [OUT] [SEED]
set -euo pipefail
# shellcheck source=demo-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo-env.sh" "$@" # HERE, KVWB, WORK
PAIRS_DIR="${2:?a folder of public labelled pair files (*.tsv)}"
QUORA="${3:?the labelled Quora file similiar_qqp_full.json}"
OUT="${4:-$WORK/pairs}"
SEED="${5:-1}"
mkdir -p "$OUT"
A="$HERE/models/a"

if ls "$PAIRS_DIR"/*.tsv | grep -qi -e quora -e qqp; then
  echo "refusing: a file in $PAIRS_DIR names Quora; the evaluation must stay held out" >&2
  exit 2
fi
cat "$PAIRS_DIR"/*.tsv > "$OUT/public.tsv"
echo "training pairs: $(wc -l < "$OUT/public.tsv") lines from $(ls "$PAIRS_DIR"/*.tsv | xargs -n1 basename | tr '\n' ' ')" >&2

E="$OUT/embedder"
V="$OUT/verifier"
if [ ! -f "$E/model.safetensors" ]; then
  "$KVWB" train-embedder --pairs "$OUT/public.tsv" --out "$E" --force --steps 2000 --eval-every 200 \
    --patience 4 --batch 64 --vocab 6000 --threads 1 --seed "$SEED" > "$OUT/embedder.json"
fi
if [ ! -f "$V/model.safetensors" ]; then
  "$KVWB" train-verifier --pairs "$OUT/public.tsv" --init "$E" --out "$V" --force --steps 2000 \
    --eval-every 200 --patience 4 --batch 32 --lr 5e-4 --threads 1 --seed "$SEED" > "$OUT/verifier.json"
fi
# the embedder's threshold for precision 0.9 on its own validation pairs
T_E=$(jq -r '.evaluation.trained.at_precision_0_9.threshold // 0.9 | . * 100 | ceil / 100' "$E/train_log.json")
echo "embedder validation: $(jq -c '.evaluation.trained | {auc, average_precision, at_precision_0_9}' "$E/train_log.json")" >&2
echo "verifier validation: $(jq -c '.evaluation.trained | {auc, average_precision, at_precision_0_9}' "$V/train_log.json")" >&2

sample() { # n out.tsv (n = 0: every pair)
  python3 - "$QUORA" "$1" "$SEED" "$2" <<'PY'
import json, random, sys
src, n, seed, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = json.load(open(src))
def clean(t):  # spacing collapsed; a field with a quote is quoted as Quora's file quotes it
    t = ' '.join(t.split())
    return '"' + t.replace('"', '""') + '"' if '"' in t else t
pick = data
if n > 0:
    rng = random.Random(seed)
    dup = [p for p in data if p['label'] == 1]
    non = [p for p in data if p['label'] == 0]
    pick = rng.sample(dup, n // 2) + rng.sample(non, n // 2)
    rng.shuffle(pick)
with open(out, 'w') as f:
    f.write('id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n')
    for i, p in enumerate(pick):
        f.write(f"{i}\t{2*i+1}\t{2*i+2}\t{clean(p['text_a'])}\t{clean(p['text_b'])}\t{int(p['label'])}\n")
PY
}

row() { # label workload duplicates args...
  local label="$1" w="$2" dups="$3"; shift 3
  "$KVWB" replay --workload "$w" --model-a "$A" --tiers semantic --max-tokens 1 --threads 1 --json "$@" \
    > "$OUT/replay.json"
  jq -r --arg l "$label" --argjson d "$dups" '.total as $t | ($t.hits - $t.false_hits) as $tp |
    "| \($l) | \($t.hits) | \($t.false_hits) | \(if $t.hits > 0 then ($tp / $t.hits * 1000 | round / 1000) else "-" end) | \($tp / $d * 1000 | round / 1000) | " +
    (if $t.verifier.candidates > 0 then "\($t.verifier.candidates) / \($t.verifier.false_hits_prevented) / \($t.verifier.hits_lost)" else "-" end) + " |"' \
    "$OUT/replay.json"
}

table() { # workload duplicates
  local w="$1" d="$2"
  printf '| embedder, threshold, guards, verifier | hits | false | precision | recall | verified: candidates / false hits prevented / hits lost |\n|:--|--:|--:|--:|--:|:--|\n'
  row "lexical, 0.8, none" "$w" "$d" --embedder lexical --threshold 0.8 --guards none
  row "lexical, 0.8, all" "$w" "$d" --embedder lexical --threshold 0.8 --guards all
  row "pairs embedder, 0.8, none" "$w" "$d" --embedder "$E" --threshold 0.8 --guards none
  row "pairs embedder, $T_E (validation P 0.9), none" "$w" "$d" --embedder "$E" --threshold "$T_E" --guards none
  row "pairs embedder, $T_E, all" "$w" "$d" --embedder "$E" --threshold "$T_E" --guards all
  row "pairs embedder, 0.7, none, verifier" "$w" "$d" --embedder "$E" --threshold 0.7 --guards none --verifier "$V"
  row "pairs embedder, 0.7, all, verifier" "$w" "$d" --embedder "$E" --threshold 0.7 --guards all --verifier "$V"
  row "pairs embedder, 0.7, all, verifier overrules guards" "$w" "$d" --embedder "$E" --threshold 0.7 \
    --guards all --verifier "$V" --verifier-overrules-guards
  row "pairs embedder, 0.7, all, verifier at 0.5" "$w" "$d" --embedder "$E" --threshold 0.7 --guards all \
    --verifier "$V" --verifier-threshold 0.5
}

sample 1000 "$OUT/quora1000.tsv"
"$KVWB" workload quora --input "$OUT/quora1000.tsv" --out "$OUT/quora1000.jsonl" --force >&2
echo "### Quora, 1,000 pairs (500 duplicates), seed $SEED"
table "$OUT/quora1000.jsonl" 500
if [ "${FULL:-0}" = 1 ]; then
  sample 0 "$OUT/quora-all.tsv"
  "$KVWB" workload quora --input "$OUT/quora-all.tsv" --out "$OUT/quora-all.jsonl" --force >&2
  D=$(awk -F'\t' 'NR > 1 && $6 == 1' "$OUT/quora-all.tsv" | wc -l)
  echo "### Quora, every pair ($D duplicates)"
  printf '| embedder, threshold, guards, verifier | hits | false | precision | recall | verified |\n|:--|--:|--:|--:|--:|:--|\n'
  row "lexical, 0.8, all" "$OUT/quora-all.jsonl" "$D" --embedder lexical --threshold 0.8 --guards all
  row "pairs embedder, $T_E, all" "$OUT/quora-all.jsonl" "$D" --embedder "$E" --threshold "$T_E" --guards all
  row "pairs embedder, 0.7, all, verifier" "$OUT/quora-all.jsonl" "$D" --embedder "$E" --threshold 0.7 \
    --guards all --verifier "$V"
fi
