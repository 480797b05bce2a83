#!/usr/bin/env bash
# Builds kvwb's libFuzzer targets (core/ with clang, AddressSanitizer + UBSan; tests/fuzz) and runs
# each for a bounded time: first every kept regression input (tests/fuzz/regressions/<target>/),
# then KVWB_FUZZ_SECONDS (default 20) of fuzzing from a seed corpus the project writes itself.
# A crash, a sanitizer report, a timeout or an exception other than kvwb::core::Error fails the
# run; the input is left in build-fuzz/findings/ (copy it to tests/fuzz/regressions/<target>/ once
# fixed). Prints executions per target.
#
#   packaging/fuzz.sh              KVWB_FUZZ_BUILD_DIR (default build-fuzz), KVWB_FUZZ_SECONDS
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${KVWB_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SECONDS_EACH="${KVWB_FUZZ_SECONDS:-20}"

CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVWB_FUZZ=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)"

export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
seeds="$BUILD/seeds"
rm -rf "$seeds" "$BUILD/findings"
mkdir -p "$BUILD/findings"
"$BUILD/fuzz/kvwb_fuzz_seeds" "$seeds" "$ROOT/projects/demo/models/a/tokenizer.model"

status=0
printf '| target | regressions | seconds | executions | result |\n|:--|--:|--:|--:|:--|\n'
for exe in "$BUILD"/fuzz/fuzz_*; do
  target="$(basename "$exe")"
  name="${target#fuzz_}"
  corpus="$BUILD/corpus/$name"
  mkdir -p "$corpus"
  [ -d "$seeds/$name" ] && cp -n "$seeds/$name"/* "$corpus"/ 2>/dev/null || true
  log="$BUILD/findings/$target.log"
  regressions=0
  if [ -d "$ROOT/tests/fuzz/regressions/$name" ]; then
    regressions=$(find "$ROOT/tests/fuzz/regressions/$name" -type f | wc -l)
    if [ "$regressions" -gt 0 ] && ! "$exe" -runs=1 "$ROOT/tests/fuzz/regressions/$name"/* >"$log" 2>&1; then
      printf '| %s | %s | - | - | regression FAILED (%s) |\n' "$name" "$regressions" "$log"
      status=1
      continue
    fi
  fi
  max_len=65536 seconds="$SECONDS_EACH"
  if [ "$name" = experiment ]; then
    max_len=262144               # the seed files are 75-140 KB of HDF5
    seconds=$((SECONDS_EACH * 3)) # ~10 inputs a second: each opens the file five times
  fi
  if "$exe" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$BUILD/findings/$target-" "$corpus" >"$log" 2>&1; then
    result=ok
  else
    result="FAILED: $(grep -m1 -E 'ERROR|SUMMARY|terminate|timeout|out-of-memory' "$log" || echo see log) ($log)"
    status=1
  fi
  execs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  printf '| %s | %s | %s | %s | %s |\n' "$name" "$regressions" "$seconds" "$execs" "$result"
done
exit $status
