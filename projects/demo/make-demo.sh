#!/usr/bin/env bash
# Regenerates everything in projects/demo from WordNet (Debian's wordnet-base) with fixed seeds:
# the corpus, the shared SentencePiece tokenizer, model A and model B, the demo workload, and two
# more models: B2 (B's preset and tokenizer, another seed, the other half of the concepts: an
# unrelated pair A -> B2) and C (A's geometry with its own tokenizer of 1536 pieces: a
# cross-tokenizer pair C -> B), and P (B fine-tuned to render a concept's knowledge for a user
# profile: the knowledge tier's personalised model B), the demo's sentence embedder (a small
# BERT-family encoder trained contrastively on the concepts' paraphrases, the demo project's
# semantic embedder), and two targets for the hardest transfers: U (A's geometry with a unigram
# tokenizer, whose boundaries cross the BPE models' rather than nest in them: U -> B) and D (A's
# geometry reading characters: A -> D, a target finer than its source). About 60 minutes on a
# 2-core machine.
#
#   projects/demo/make-demo.sh [path/to/kvwb]
#   KVWB_DEMO_ONLY="b2 c" projects/demo/make-demo.sh    # only these steps (a b workload b2 c p embedder u d)
#
# KVWB_DEMO_ONLY names the steps to run, leaving the other models as they are; the corpus is always
# rebuilt (seconds), B2 needs models/a's tokenizer, and P needs models/b and the workload. The corpus itself is not committed;
# models/, workloads/ and the evaluation numbers in docs/demo-models.md are.
set -euo pipefail
# shellcheck source=demo-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo-env.sh" "$@" # HERE, KVWB, WORK
SEED=1
ONLY="${KVWB_DEMO_ONLY:-a b workload b2 c p embedder u d}"
for step in $ONLY; do
  case "$step" in a | b | workload | b2 | c | p | embedder | u | d) ;; *) echo "KVWB_DEMO_ONLY: unknown step '$step' (a b workload b2 c p embedder u d)" >&2; exit 2 ;; esac
done
want() { [[ " $ONLY " == *" $1 "* ]]; }
mkdir -p "$WORK" "$HERE/models" "$HERE/workloads"

echo "== corpus"
"$KVWB" corpus wordnet --out "$WORK/corpus.jsonl" --force --concepts 1000 --seed $SEED

if want a; then
echo "== model A (source: 4 layers, 4 heads / 2 kv heads of 32)"
rm -rf "$HERE/models/a"
"$KVWB" train --corpus "$WORK/corpus.jsonl" --out "$HERE/models/a" --preset demo-a \
  --train-tokenizer 1024 --steps 1300 --batch 16 --seq-len 128 --lr 4e-3 --warmup 60 \
  --eval-every 200 --checkpoint-every 0 --weight-dtype BF16 --seed $SEED --threads 2
fi

if want b; then
echo "== model B (target: 6 layers, 4 heads / 2 kv heads of 64)"
rm -rf "$HERE/models/b"
"$KVWB" train --corpus "$WORK/corpus.jsonl" --out "$HERE/models/b" --preset demo-b \
  --tokenizer "$HERE/models/a/tokenizer.model" --steps 1200 --batch 16 --seq-len 128 --lr 2.5e-3 \
  --warmup 60 --eval-every 200 --checkpoint-every 0 --weight-dtype BF16 --seed $SEED --threads 2
fi

# training state is for resuming; the committed models keep only what the engine loads
rm -rf "$HERE/models/a/train_state" "$HERE/models/b/train_state"

if want workload; then
echo "== workload"
# system prompts of at most 120 words keep prompt + 64 answer tokens inside the models' 512 context
"$KVWB" workload wordnet --out "$HERE/workloads/demo.jsonl" --force --requests 2000 --concepts 1000 --seed $SEED \
  --system-words 10,40,120
fi

if want b2; then
echo "== model B2 (target: B's preset and tokenizer; seed 2; concepts of odd rank only)"
# --shard 1/2 keeps the documents of every second concept (popularity rank 1, 3, 5, ...), training
# and validation alike: B2 has never seen a question about half the concepts A and B know. Half the
# documents in half of B's steps: B2 sees each of its documents about as often as B did (6.4 vs 6.3
# times).
rm -rf "$HERE/models/b2"
"$KVWB" train --corpus "$WORK/corpus.jsonl" --out "$HERE/models/b2" --preset demo-b --shard 1/2 \
  --tokenizer "$HERE/models/a/tokenizer.model" --steps 600 --batch 16 --seq-len 128 --lr 2.5e-3 \
  --warmup 60 --eval-every 200 --checkpoint-every 0 --weight-dtype BF16 --seed 2 --threads 2
rm -rf "$HERE/models/b2/train_state"
fi

if want c; then
echo "== model C (source: A's geometry, its own SentencePiece tokenizer of 1536 pieces; seed 3)"
rm -rf "$HERE/models/c"
"$KVWB" train --corpus "$WORK/corpus.jsonl" --out "$HERE/models/c" --preset demo-a \
  --train-tokenizer 1536 --steps 1300 --batch 16 --seq-len 128 --lr 4e-3 --warmup 60 \
  --eval-every 200 --checkpoint-every 0 --weight-dtype BF16 --seed 3 --threads 2
rm -rf "$HERE/models/c/train_state"
fi

if want u; then
echo "== model U (A's geometry, its own unigram tokenizer of 1024 pieces: boundaries that cross BPE's; seed 5)"
rm -rf "$HERE/models/u"
"$KVWB" train --corpus "$WORK/corpus.jsonl" --out "$HERE/models/u" --preset demo-a \
  --train-tokenizer 1024 --tokenizer-type unigram --steps 1300 --batch 16 --seq-len 128 --lr 4e-3 --warmup 60 \
  --eval-every 200 --checkpoint-every 0 --weight-dtype BF16 --seed 5 --threads 2
rm -rf "$HERE/models/u/train_state"
fi

if want d; then
echo "== model D (A's geometry reading characters: one piece per character of the corpus; seed 6)"
# 256 characters a row hold about as much text as 64 of the BPE models' tokens
rm -rf "$HERE/models/d"
"$KVWB" train --corpus "$WORK/corpus.jsonl" --out "$HERE/models/d" --preset demo-a \
  --train-tokenizer 256 --tokenizer-type char --steps 1000 --batch 16 --seq-len 256 --lr 4e-3 --warmup 60 \
  --eval-every 200 --checkpoint-every 0 --weight-dtype BF16 --seed 6 --threads 2
rm -rf "$HERE/models/d/train_state"
fi

if want p; then
echo "== model P (B fine-tuned: [system] [knowledge] [profile instruction] Q: ... A: the profile's answer)"
# Six documents per concept (a drawn profile, a training question, the concept's knowledge in 3 of
# 4, one of the workload's system prompts in 3 of 5; docs/knowledge.md, "Personalisation"), mixed
# with B's own corpus so that P keeps answering plain questions; 256-token rows hold a system
# prompt, the knowledge and the answer.
"$KVWB" knowledge corpus --concepts 1000 --workload "$HERE/workloads/demo.jsonl" --per-node 6 \
  --seed $SEED --out "$WORK/personal.jsonl" --force
cat "$WORK/corpus.jsonl" "$WORK/personal.jsonl" > "$WORK/corpus-p.jsonl"
rm -rf "$HERE/models/p"
"$KVWB" train --corpus "$WORK/corpus-p.jsonl" --out "$HERE/models/p" --config "$HERE/models/b/config.json" \
  --init "$HERE/models/b" --tokenizer "$HERE/models/b/tokenizer.model" --steps 400 --batch 16 --seq-len 256 \
  --lr 1e-3 --warmup 20 --eval-every 100 --checkpoint-every 0 --weight-dtype BF16 --seed 4 --threads 2
rm -rf "$HERE/models/p/train_state"
fi

if want embedder; then
echo "== sentence embedder (2 layers of 128, WordPiece 4000; every 10th concept and 3 templates held out)"
# Contrastive (InfoNCE) on question pairs of the same concept in other words or with a synonym,
# near misses (a sibling asked the same way) as hard negatives; one thread: the same run gives the
# same weights. Prints the held-out evaluation against the lexical embedders (also train_log.json).
"$KVWB" train-embedder --out "$HERE/models/embedder" --concepts 1000 --hold-out-every 10 --steps 2000 \
  --batch 64 --seed $SEED --threads 1 --force
fi

echo "== evaluation (held-out phrasings of the 200 most popular concepts)"
for m in a b b2 c u d; do
  want "$m" || continue
  "$KVWB" eval-qa --model "$HERE/models/$m" --corpus "$WORK/corpus.jsonl" --top 200 --limit 400 --json \
    > "$WORK/eval-$m.json"
  cat "$WORK/eval-$m.json"; echo
done
if want b2; then
  # B2 on its own concepts (shard 1/2) and on the ones it never saw (shard 0/2)
  for s in 1 0; do
    "$KVWB" eval-qa --model "$HERE/models/b2" --corpus "$WORK/corpus.jsonl" --top 200 --limit 400 \
      --shard $s/2 --json > "$WORK/eval-b2-shard$s.json"
    cat "$WORK/eval-b2-shard$s.json"; echo
  done
fi
for m in a b b2 c p u d; do
  if want "$m"; then du -b "$HERE/models/$m"; fi
done
