#!/usr/bin/env bash
# Reproduces the knowledge tier's numbers of docs/knowledge.md on the demo workload: a graph of the
# 1000 demo concepts with model P's modules, one seeded profile per user, then
#   - the ledger: the first N requests replayed through knowledge,prefix (with verification, and
#     without it: the false reuse verification prevents), with --shadow to check placements;
#   - the economics: kvwb knowledge evaluate on the same requests (no cache, semantic cache,
#     knowledge tier verified and unverified, knowledge in the prompt), stored in an experiment file
#     for the report's Knowledge reuse section, and the same with the base model B (profiles
#     ignored) for the answer-length table.
# One thread per engine (docs/engine.md: timings with spinning workers measure the scheduler).
# Usage: projects/demo/make-knowledge-report.sh [path/to/kvwb] [requests]
set -euo pipefail
# shellcheck source=demo-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo-env.sh" "$@" # HERE, KVWB, WORK
N="${2:-800}"
OUT="$WORK/knowledge"
W="$HERE/workloads/demo.jsonl"
mkdir -p "$OUT"

"$KVWB" knowledge build --model-b "$HERE/models/p" --concepts 1000 --out "$OUT/graph-p.h5" --force --threads 1 --json \
  > "$OUT/build.json"
"$KVWB" knowledge profiles --workload "$W" --out "$OUT/profiles.json" --force --seed 1
run() { # name [flags]
  local name="$1"; shift
  "$KVWB" replay --workload "$W" --model-a "$HERE/models/a" --model-b "$HERE/models/p" --limit "$N" \
    --threads 1 --ledger "$OUT/ledger-$name.csv" --force --json "$@" > "$OUT/replay-$name.json" 2> "$OUT/replay-$name.log"
  echo "$name: $OUT/replay-$name.json"
}
K=(--knowledge "$OUT/graph-p.h5" --profiles "$OUT/profiles.json")
run knowledge-prefix --tiers knowledge,prefix --shadow 0.1 "${K[@]}"
run knowledge-prefix-unverified --tiers knowledge,prefix --no-verify "${K[@]}"
run prefix --tiers prefix

rm -f "$OUT/knowledge.h5"
"$KVWB" capture --model-a "$HERE/models/a" --model-b "$HERE/models/p" --prompts "$W" --limit 1 \
  --out "$OUT/knowledge.h5" --threads 1 > /dev/null 2>&1
"$KVWB" knowledge evaluate --workload "$W" --model-a "$HERE/models/a" --model-b "$HERE/models/p" \
  --knowledge "$OUT/graph-p.h5" --profiles "$OUT/profiles.json" --limit "$N" --threads 1 \
  --ledger-dir "$OUT/evaluate" --force --experiment "$OUT/knowledge.h5" --save demo | tee "$OUT/economics.md"
# the same with the base model B, which was never shown a profile line: what P's fine-tuning does
"$KVWB" knowledge evaluate --workload "$W" --model-a "$HERE/models/a" --model-b "$HERE/models/b" \
  --knowledge "$OUT/graph-p.h5" --profiles "$OUT/profiles.json" --limit "$N" --threads 1 \
  --ledger-dir "$OUT/evaluate-b" --force | tee "$OUT/economics-b.md"
"$KVWB" report --experiment "$OUT/knowledge.h5" --out "$OUT/report" --force > /dev/null
echo "report: $OUT/report"
