#!/usr/bin/env bash
# Reproduces the tables of docs/fleet.md on the demo workload: the first N requests replayed by a
# fleet of 1, 2 and 4 worker processes under each routing policy, each worker with its own caches
# ("local") or all of them on one Redis server ("redis"), then what a KV cache's trip through Redis
# costs against recomputing it (kvwb bench-store), capacity limits and eviction policies (the
# workbench's own against Redis maxmemory), conversations under each history policy, and one ledger
# under every price preset. Starts its own redis-server on a loopback port (no persistence) and
# stops it at the end. One thread per worker.
# Usage: projects/demo/make-fleet-report.sh [path/to/kvwb] [requests]
set -euo pipefail
# shellcheck source=demo-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo-env.sh" "$@" # HERE, KVWB, WORK
N="${2:-400}"
# The capacity table's limits: the workbench's prefix KV limit per model in bytes (models A and B:
# twice this; the first 400 requests' prefix KV is about 13 MB unlimited), and Redis's maxmemory for
# everything it holds (KV blocks, response and semantic entries, its own overhead: about 1 MB empty),
# so that both hold about the same bytes.
CAP=4000000
RCAP=10mb
OUT="$WORK/fleet"
W="$HERE/workloads/demo.jsonl"
mkdir -p "$OUT/redis"

for try in 1 2 3 4 5; do
  PORT=$(shuf -i 20000-60000 -n 1)
  redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT/redis" \
    --maxmemory 1gb --maxmemory-policy allkeys-lru > "$OUT/redis/server.log" 2>&1 &
  RPID=$!
  for i in $(seq 50); do redis-cli -p "$PORT" ping > /dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$PORT" ping > /dev/null 2>&1 && break
  kill "$RPID" 2> /dev/null || true
done
trap 'kill "$RPID" 2> /dev/null || true' EXIT
URL="redis://127.0.0.1:$PORT"

run() { # name workers routing [flags]
  local name="$1" workers="$2" routing="$3"; shift 3
  "$KVWB" replay --workload "$W" --model-a "$HERE/models/a" --model-b "$HERE/models/b" \
    --tiers exact,semantic,prefix --limit "$N" --max-tokens 16 --threads 1 \
    --workers "$workers" --routing "$routing" --ledger "$OUT/ledger-$name.csv" --force --json "$@" \
    > "$OUT/fleet-$name.json" 2> "$OUT/fleet-$name.log"
}
for workers in 1 2 4; do
  for routing in round-robin tenant-affine prefix-hash least-loaded; do
    [ "$workers" = 1 ] && [ "$routing" != round-robin ] && continue
    run "$workers-$routing-local" "$workers" "$routing"
    run "$workers-$routing-redis" "$workers" "$routing" --store "$URL" --store-flush
    echo "$workers workers, $routing: done"
  done
done

echo
echo "| workers | routing | caches | hit rate | token hit rate | exact | semantic | prefix | TTFT p50 ms | TTFT p95 ms | wall s | store MB moved | store ms |"
echo "|--:|:--|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
for workers in 1 2 4; do
  for routing in round-robin tenant-affine prefix-hash least-loaded; do
    [ "$workers" = 1 ] && [ "$routing" != round-robin ] && continue
    for caches in local redis; do
      jq -r --arg w "$workers" --arg r "$routing" --arg c "$caches" '
        "| \($w) | \($r) | \($c) | \(.total.hit_rate*1000|round/1000) | \(.total.token_hit_rate*1000|round/1000) | \(.tiers.exact.hits) | \(.tiers.semantic.hits) | \(.tiers.prefix.hits) | \(.total.ttft_ms_p50*100|round/100) | \(.total.ttft_ms_p95*100|round/100) | \(.fleet.wall_s*10|round/10) | \(if .store then ((.store.bytes_sent + .store.bytes_received)/1e5|round/10) else "-" end) | \(if .store then (.store.net_ms|round) else "-" end) |"' \
        "$OUT/fleet-$workers-$routing-$caches.json"
    done
  done
done
echo
echo "== capacity: one process, the first $N requests, prefix KV held to $((CAP / 1000000)) MB per model by the"
echo "   workbench's own limit (--prefix-bytes, per policy), everything to maxmemory $RCAP in Redis (per policy)"
cap() { # name [flags]
  local name="$1"; shift
  "$KVWB" replay --workload "$W" --model-a "$HERE/models/a" --model-b "$HERE/models/b" \
    --tiers exact,semantic,prefix --limit "$N" --max-tokens 16 --threads 1 --json "$@" \
    > "$OUT/capacity-$name.json" 2> "$OUT/capacity-$name.log"
}
cap local-unlimited
for policy in lru lfu fifo; do
  cap "local-$policy" --prefix-bytes "$CAP" --eviction "$policy"
done
for policy in allkeys-lru allkeys-lfu allkeys-random noeviction; do
  redis-cli -p "$PORT" config set maxmemory "$RCAP" > /dev/null
  redis-cli -p "$PORT" config set maxmemory-policy "$policy" > /dev/null
  redis-cli -p "$PORT" flushall > /dev/null
  redis-cli -p "$PORT" config resetstat > /dev/null
  cap "redis-$policy" --store "$URL"
done
redis-cli -p "$PORT" config set maxmemory 1gb > /dev/null
redis-cli -p "$PORT" config set maxmemory-policy allkeys-lru > /dev/null
echo "| store | limit | policy | hit rate | token hit rate | exact | semantic | prefix | held MB | evicted | writes refused |"
echo "|:--|--:|:--|--:|--:|--:|--:|--:|--:|--:|--:|"
jq -r '"| in process | none | - | \(.total.hit_rate*1000|round/1000) | \(.total.token_hit_rate*1000|round/1000) | \(.tiers.exact.hits) | \(.tiers.semantic.hits) | \(.tiers.prefix.hits) | \(([.tier_stores[].bytes]|add)/1e5|round/10) | 0 | - |"' \
  "$OUT/capacity-local-unlimited.json"
for policy in lru lfu fifo; do
  jq -r --arg p "$policy" --arg c "$((CAP / 1000000)) MB of KV per model" '"| in process | \($c) | \($p) | \(.total.hit_rate*1000|round/1000) | \(.total.token_hit_rate*1000|round/1000) | \(.tiers.exact.hits) | \(.tiers.semantic.hits) | \(.tiers.prefix.hits) | \(([.tier_stores[].bytes]|add)/1e5|round/10) | \([.tier_stores[].evictions]|add) | - |"' \
    "$OUT/capacity-local-$policy.json"
done
for policy in allkeys-lru allkeys-lfu allkeys-random noeviction; do
  jq -r --arg p "$policy" --arg c "maxmemory $RCAP" '"| Redis | \($c) | \($p) | \(.total.hit_rate*1000|round/1000) | \(.total.token_hit_rate*1000|round/1000) | \(.tiers.exact.hits) | \(.tiers.semantic.hits) | \(.tiers.prefix.hits) | \(.store.server.used_bytes/1e5|round/10) | \(.store.server.evicted_keys) | \(.store.unavailable) |"' \
    "$OUT/capacity-redis-$policy.json"
done

echo
echo "== KV blocks as float32, bf16 and f16: one process over Redis, a quarter of the hits re-run from scratch"
echo "| KV dtype | hit rate | token hit rate | store MB moved | store ms | shadowed prefix hits | same output | next-token KL mean | max |"
echo "|:--|--:|--:|--:|--:|--:|--:|--:|--:|"
for dtype in f32 bf16 f16; do
  "$KVWB" replay --workload "$W" --model-a "$HERE/models/a" --model-b "$HERE/models/b" \
    --tiers exact,semantic,prefix --limit "$N" --max-tokens 16 --threads 1 --store "$URL" --store-flush \
    --store-kv-dtype "$dtype" --shadow 0.25 --ledger "$OUT/dtype-$dtype.csv" --force --json \
    > "$OUT/dtype-$dtype.json" 2> "$OUT/dtype-$dtype.log"
  shadow=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) c[$i] = i; next }
    $c["answered_by"] == "prefix" && $c["shadow_exact"] != "" && $c["shadow_exact"] != "-1" {
      n++; same += $c["shadow_exact"]; kl += $c["shadow_kl"]; if ($c["shadow_kl"] > mx) mx = $c["shadow_kl"] }
    END { if (n) printf "%d | %d | %.2e | %.2e", n, same, kl / n, mx; else printf "0 | - | - | -" }' "$OUT/dtype-$dtype.csv")
  jq -r --arg d "$dtype" --arg s "$shadow" '"| \($d) | \(.total.hit_rate*1000|round/1000) | \(.total.token_hit_rate*1000|round/1000) | \((.store.bytes_sent + .store.bytes_received)/1e5|round/10) | \(.store.net_ms|round) | \($s) |"' \
    "$OUT/dtype-$dtype.json"
done

echo
"$KVWB" bench-store --store "$URL" --model "$HERE/models/b" --lengths 16,64,256,448 --threads 1 | tee "$OUT/bench-store.md"
echo
"$KVWB" bench-store --store "$URL" --model "$HERE/models/b" --lengths 16,64,256,448 --threads 1 --dtype bf16 |
  tee "$OUT/bench-store-bf16.md"

echo
echo "== conversations: 8 users x 5 rounds through the prefix tier, per history policy"
for policy in full window:2 summary:1 summary-model:1; do
  name="${policy/:/-}"
  if [ "$policy" = summary-model:1 ]; then
    # the summary written by model A (kvwb summarise), from the full-history conversations
    "$KVWB" summarise --workload "$OUT/mt-full.jsonl" --model "$HERE/models/a" --keep 1 --max-tokens 32 \
      --out "$OUT/mt-$name.jsonl" --force --threads 1 --json > "$OUT/mt-$name.cost"
  else
    "$KVWB" workload multiturn --out "$OUT/mt-$name.jsonl" --force --users 8 --rounds 5 --system-tokens 100 \
      --concepts 1000 --history-policy "$policy" --seed 1 > /dev/null 2> "$OUT/mt-$name.cost"
  fi
  "$KVWB" replay --workload "$OUT/mt-$name.jsonl" --model-a "$HERE/models/a" --tiers prefix --max-tokens 16 \
    --threads 1 --ledger "$OUT/mt-ledger-$name.csv" --outputs "$OUT/mt-out-$name.jsonl" --force --json \
    > "$OUT/mt-replay-$name.json" 2> /dev/null
done
echo "| policy | round | prompt tokens | token hit rate | ROUGE-L vs full | same answer as full |"
echo "|:--|--:|--:|--:|--:|--:|"
for policy in full window:2 summary:1 summary-model:1; do
  name="${policy/:/-}"
  "$KVWB" workload rounds --workload "$OUT/mt-$name.jsonl" --ledger "$OUT/mt-ledger-$name.csv" \
    --outputs "$OUT/mt-out-$name.jsonl" --reference-outputs "$OUT/mt-out-full.jsonl" --json |
    jq -r --arg p "$policy" '.rounds[] | "| \($p) | \(.round) | \(.prompt_tokens) | \(.token_hit_rate*1000|round/1000) | \(.rouge_l_vs_reference*1000|round/1000) | \(.same_answer_as_reference*1000|round/1000) |"'
done
jq -r '"model-written summaries: \(.summaries) of \(.conversations) conversations, \(.summary_prompt_tokens) tokens read, \(.summary_tokens) generated, \(.summary_ms|round) ms"' "$OUT/mt-summary-model-1.cost"
echo
echo "== one ledger (4 workers, prefix-hash, Redis) under every price preset"
"$KVWB" prices --ledger "$OUT/ledger-4-prefix-hash-redis.csv" | tee "$OUT/prices.md"
