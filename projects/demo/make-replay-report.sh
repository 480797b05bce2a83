#!/usr/bin/env bash
# Reproduces the replay table of docs/replay.md on the demo workload: the same requests through five
# tier stacks (none; exact; exact+semantic; +prefix; +cross-model), variants of the semantic key
# and embedder, and the KV tiers alone. Needs the converter of make-transfer-report.sh (it runs it when the experiment is missing).
# Usage: projects/demo/make-replay-report.sh [path/to/kvwb] [requests]
set -euo pipefail
# shellcheck source=demo-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo-env.sh" "$@" # HERE, KVWB, WORK
N="${2:-2000}"
EXP="$WORK/transfer/demo-transfer.h5"
OUT="$WORK/replay"
mkdir -p "$OUT"
[ -f "$EXP" ] || "$HERE/make-transfer-report.sh" "$KVWB"

run() { # name tiers [flags]
  local name="$1" tiers="$2"; shift 2
  "$KVWB" replay --workload "$HERE/workloads/demo.jsonl" --experiment "$EXP" --converter all \
    --tiers "$tiers" --limit "$N" --max-tokens 32 --ledger "$OUT/ledger-$name.csv" --force --json "$@" \
    > "$OUT/replay-$name.json" 2> "$OUT/replay-$name.log"
  echo "$name: $OUT/replay-$name.json"
}
run none none
run exact exact
run exact-semantic exact,semantic
run exact-semantic-prefix exact,semantic,prefix
run all exact,semantic,prefix,cross --shadow 0.1
# the naive semantic key: the whole prompt, shared system prompt included
run semantic-prompt exact,semantic --embed prompt
run semantic-model exact,semantic --embedder model
# KV reuse alone (no response caches): what prefix and cross-model reuse save by themselves
run prefix prefix --shadow 0.1
run prefix-cross prefix,cross --shadow 0.1
run prefix-cross-nogate prefix,cross --no-gate --shadow 0.1
# the cross-model tier on its own: B reuses what A cached, with and without the quality gate
run cross cross --shadow 0.2
run cross-nogate cross --no-gate --shadow 0.2
