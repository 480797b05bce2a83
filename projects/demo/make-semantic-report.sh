#!/usr/bin/env bash
# Reproduces the semantic tier's tables of docs/cache-tiers.md: on the demo workload's first N
# labelled requests, the threshold sweep of each embedder (lexical, lexical-idf, model A's hidden
# states, the demo's own sentence embedder) and replays of the exact and semantic tiers with a
# global threshold and with per-entry thresholds under an error bound; then, when a labelled pair
# file in Quora's columns is given (id, qid1, qid2, question1, question2, is_duplicate: Quora's
# pairs, or MRPC converted as the docs show), the same sweeps and a per-entry replay on it.
# One thread; the replays generate one token a request (their hits, not their answers, are measured).
# Usage: projects/demo/make-semantic-report.sh [path/to/kvwb] [requests] [PAIRS.tsv]
set -euo pipefail
# shellcheck source=demo-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo-env.sh" "$@" # HERE, KVWB, WORK
N="${2:-2000}"
PAIRS="${3:-}"
WORK="$WORK/semantic"
mkdir -p "$WORK"
W="$HERE/workloads/demo.jsonl"
A="$HERE/models/a"
B="$HERE/models/b"
E="$HERE/models/embedder"

sweep_table() { # workload limit-args...
  local w="$1"; shift
  printf '| embedder | at 0.80 (P / R / FHR) | at 0.90 | threshold for false hits <= 10%% (P, R) |\n|:--|:--|:--|:--|\n'
  for emb in lexical lexical-idf model "$E"; do
    local extra=()
    [ "$emb" = model ] && extra=(--model-a "$A")
    "$KVWB" sweep-semantic --workload "$w" "$@" --embedder "$emb" "${extra[@]}" --threads 1 --json \
      > "$WORK/sweep.json"
    jq -r '. as $s | def pt(t): ($s.points[] | select((.threshold - t) | fabs < 1e-9)
             | "\(.precision * 1000 | round / 1000) / \(.recall * 1000 | round / 1000) / \(.false_hit_rate * 1000 | round / 1000)");
           "| \($s.embedder) | \(pt(0.8)) | \(pt(0.9)) | " +
           (if $s.at_target == null then "none" else
            "\($s.at_target.threshold) (\($s.at_target.precision * 1000 | round / 1000), \($s.at_target.recall * 1000 | round / 1000))" end) + " |"' \
      "$WORK/sweep.json"
  done
}

replay_row() { # label workload args...
  local label="$1" w="$2"; shift 2
  "$KVWB" replay --workload "$w" --model-a "$A" --model-b "$B" --max-tokens 1 --threads 1 --json "$@" \
    > "$WORK/replay.json"
  jq -r --arg l "$label" '.tiers.semantic as $t | "| \($l) | \($t.hits) | \($t.false_hits) | " +
      (if $t.hits > 0 then "\((($t.hits - $t.false_hits) / $t.hits) * 1000 | round / 1000)" else "-" end) + " |"' \
    "$WORK/replay.json"
}

echo "== demo workload, first $N requests: threshold sweep"
sweep_table "$W" --limit "$N"
echo
echo "== demo workload, first $N requests: exact + semantic tiers replayed with the demo embedder"
printf '| semantic thresholds | hits | false hits | precision |\n|:--|--:|--:|--:|\n'
replay_row "global 0.9" "$W" --limit "$N" --tiers exact,semantic --embedder "$E" --threshold 0.9
replay_row "global 0.8" "$W" --limit "$N" --tiers exact,semantic --embedder "$E" --threshold 0.8
replay_row "per entry, floor 0.7, bound 0.1" "$W" --limit "$N" --tiers exact,semantic --embedder "$E" \
  --threshold 0.7 --error-bound 0.1
replay_row "per entry, floor 0.7, bound 0.05" "$W" --limit "$N" --tiers exact,semantic --embedder "$E" \
  --threshold 0.7 --error-bound 0.05

if [ -n "$PAIRS" ]; then
  echo
  echo "== labelled pairs: $PAIRS"
  "$KVWB" workload quora --input "$PAIRS" --out "$WORK/pairs.jsonl" --force > /dev/null
  sweep_table "$WORK/pairs.jsonl"
  printf '\n| semantic thresholds | hits | false hits | precision |\n|:--|--:|--:|--:|\n'
  replay_row "lexical-idf, per entry, floor 0.5, bound 0.1" "$WORK/pairs.jsonl" --tiers semantic \
    --embedder lexical-idf --threshold 0.5 --error-bound 0.1
fi
