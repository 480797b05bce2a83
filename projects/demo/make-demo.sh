#!/usr/bin/env bash
# Regenerates everything in projects/demo from WordNet (Debian's wordnet-base) with fixed seeds:
# the corpus, the shared SentencePiece tokenizer, model A and model B, and the demo workload.
# About 20 minutes on a 2-core machine.
#
#   projects/demo/make-demo.sh [path/to/kvwb]
#
# The corpus itself is not committed (it is rebuilt in seconds); models/, workloads/ and the
# evaluation numbers in docs/demo-models.md are.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KVWB="${1:-$HERE/../../build/kvwb}"
WORK="${KVWB_DEMO_WORK:-$HERE/../../build/demo-work}"
SEED=1
mkdir -p "$WORK" "$HERE/models" "$HERE/workloads"

echo "== corpus"
"$KVWB" corpus wordnet --out "$WORK/corpus.jsonl" --concepts 1000 --seed $SEED

echo "== model A (source: 4 layers, 4 heads / 2 kv heads of 32)"
rm -rf "$HERE/models/a"
"$KVWB" train --corpus "$WORK/corpus.jsonl" --out "$HERE/models/a" --preset demo-a \
  --train-tokenizer 1024 --steps 1300 --batch 16 --seq-len 128 --lr 4e-3 --warmup 60 \
  --eval-every 200 --checkpoint-every 0 --weight-dtype BF16 --seed $SEED --threads 2

echo "== model B (target: 6 layers, 4 heads / 2 kv heads of 64)"
rm -rf "$HERE/models/b"
"$KVWB" train --corpus "$WORK/corpus.jsonl" --out "$HERE/models/b" --preset demo-b \
  --tokenizer "$HERE/models/a/tokenizer.model" --steps 1200 --batch 16 --seq-len 128 --lr 2.5e-3 \
  --warmup 60 --eval-every 200 --checkpoint-every 0 --weight-dtype BF16 --seed $SEED --threads 2

# training state is for resuming; the committed models keep only what the engine loads
rm -rf "$HERE/models/a/train_state" "$HERE/models/b/train_state"

echo "== workload"
# system prompts of at most 120 words keep prompt + 64 answer tokens inside the models' 512 context
"$KVWB" workload wordnet --out "$HERE/workloads/demo.jsonl" --requests 2000 --concepts 1000 --seed $SEED \
  --system-words 10,40,120

echo "== evaluation (held-out phrasings of the 200 most popular concepts)"
for m in a b; do
  "$KVWB" eval-qa --model "$HERE/models/$m" --corpus "$WORK/corpus.jsonl" --top 200 --limit 400 --json \
    > "$WORK/eval-$m.json"
  cat "$WORK/eval-$m.json"; echo
done
du -b "$HERE/models/a" "$HERE/models/b"
