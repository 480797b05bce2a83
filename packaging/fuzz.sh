#!/usr/bin/env bash
# kvwb's libFuzzer targets (tests/fuzz) over core/ built with clang, AddressSanitizer + UBSan, in the
# sanitizer tree (-DKVWB_FUZZ=ON: core/, its tests and the fuzz targets; docs/development.md).
#
#   packaging/fuzz.sh                    replay: every target runs each input of its seed corpus (written
#                                        by the project's own writers, kvwb_fuzz_seeds), of its kept
#                                        corpus (tests/fuzz/corpus/<target>/: what earlier explorations
#                                        reached, minimised) and every kept regression input
#                                        (tests/fuzz/regressions/<target>/) once, and nothing else.
#                                        Deterministic: this is what CI runs.
#   packaging/fuzz.sh --explore SECONDS  explore: after the replay, fuzz each target for SECONDS (the
#                                        experiment target, at ~10 inputs a second, gets three times
#                                        that) from its seeds. Random: run by hand before submitting a
#                                        change, never in CI. A finding is copied to
#                                        tests/fuzz/regressions/<target>/ (fix it, keep it, add a unit
#                                        test row) and its log stays in build-fuzz/findings/.
#   --keep-corpus                        with --explore: merge what the exploration reached into
#                                        tests/fuzz/corpus/<target>/ (libFuzzer -merge=1: only inputs
#                                        that add coverage), so later replays cover it too
#   --targets a,b                        only these targets (names without fuzz_)
#   --no-build                           the tree is built already
#
# A crash, a sanitizer report, a timeout or an exception other than kvwb::core::Error fails the run.
# KVWB_FUZZ_BUILD_DIR overrides the tree (default build-fuzz). Prints a table, one row per target.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${KVWB_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
EXPLORE=0
SECONDS_EACH=0
TARGETS=""
DO_BUILD=1
KEEP_CORPUS=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --explore)
      EXPLORE=1
      SECONDS_EACH="${2:-}"
      if ! [[ "$SECONDS_EACH" =~ ^[1-9][0-9]*$ ]]; then
        echo "fuzz.sh: --explore needs a whole number of seconds, got '${2:-}'" >&2
        exit 2
      fi
      shift 2
      ;;
    --targets) TARGETS="${2:-}"; shift 2 ;;
    --no-build) DO_BUILD=0; shift ;;
    --keep-corpus) KEEP_CORPUS=1; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$DO_BUILD" -eq 1 ]; then
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVWB_FUZZ=ON >/dev/null
  cmake --build "$BUILD" -j"$(nproc)"
fi

export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$ROOT/tests/support/ubsan.supp"
seeds="$BUILD/seeds"
rm -rf "$seeds" "$BUILD/findings"
mkdir -p "$BUILD/findings"
"$BUILD/fuzz/kvwb_fuzz_seeds" "$seeds" "$ROOT/projects/demo/models/a/tokenizer.model"

status=0
printf '| target | seeds | kept corpus | regressions | seconds explored | executions | result |\n|:--|--:|--:|--:|--:|--:|:--|\n'
for exe in "$BUILD"/fuzz/fuzz_*; do
  target="$(basename "$exe")"
  name="${target#fuzz_}"
  if [ -n "$TARGETS" ] && [[ ",$TARGETS," != *",$name,"* ]]; then
    continue
  fi
  log="$BUILD/findings/$target.log"
  inputs=()
  nseeds=0
  if [ -d "$seeds/$name" ]; then
    while IFS= read -r -d '' f; do inputs+=("$f"); nseeds=$((nseeds + 1)); done \
      < <(find "$seeds/$name" -type f -print0 | sort -z)
  fi
  kept=0
  if [ -d "$ROOT/tests/fuzz/corpus/$name" ]; then
    while IFS= read -r -d '' f; do inputs+=("$f"); kept=$((kept + 1)); done \
      < <(find "$ROOT/tests/fuzz/corpus/$name" -type f -print0 | sort -z)
  fi
  regressions=0
  if [ -d "$ROOT/tests/fuzz/regressions/$name" ]; then
    while IFS= read -r -d '' f; do inputs+=("$f"); regressions=$((regressions + 1)); done \
      < <(find "$ROOT/tests/fuzz/regressions/$name" -type f -print0 | sort -z)
  fi
  # Replay: each input once, in a fixed order (libFuzzer runs the files it is given and stops).
  if [ "${#inputs[@]}" -gt 0 ] && ! "$exe" -runs=1 -timeout=10 -rss_limit_mb=2048 "${inputs[@]}" >"$log" 2>&1; then
    why="$(grep -m1 -E 'ERROR|SUMMARY|terminate|timeout|out-of-memory' "$log" || echo see log)"
    input="$(grep 'Running:' "$log" | tail -1 | sed 's/^Running: //')"
    printf '| %s | %s | %s | %s | - | %s | replay FAILED on %s: %s (%s) |\n' "$name" "$nseeds" "$kept" \
      "$regressions" "${#inputs[@]}" "$input" "$why" "$log"
    status=1
    continue
  fi
  if [ "$EXPLORE" -eq 0 ]; then
    printf '| %s | %s | %s | %s | 0 | %s | ok |\n' "$name" "$nseeds" "$kept" "$regressions" "${#inputs[@]}"
    continue
  fi
  corpus="$BUILD/corpus/$name"
  mkdir -p "$corpus"
  [ -d "$seeds/$name" ] && cp -n "$seeds/$name"/* "$corpus"/ 2>/dev/null || true
  dirs=("$corpus") # new inputs go to the first; the kept corpus is read too
  [ -d "$ROOT/tests/fuzz/corpus/$name" ] && dirs+=("$ROOT/tests/fuzz/corpus/$name")
  max_len=65536 seconds="$SECONDS_EACH"
  if [ "$name" = experiment ]; then
    max_len=262144               # the seed files are 75-140 KB of HDF5
    seconds=$((SECONDS_EACH * 3)) # ~10 inputs a second: each opens the file five times
  fi
  if "$exe" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$BUILD/findings/$target-" "${dirs[@]}" >>"$log" 2>&1; then
    result=ok
  else
    result="FAILED: $(grep -m1 -E 'ERROR|SUMMARY|terminate|timeout|out-of-memory' "$log" || echo see log) ($log)"
    # Keep what it found as a regression input: fix the bug, keep the file, add a unit-test row.
    mkdir -p "$ROOT/tests/fuzz/regressions/$name"
    for artifact in "$BUILD/findings/$target-"*; do
      [ -f "$artifact" ] || continue
      cp "$artifact" "$ROOT/tests/fuzz/regressions/$name/"
      result="$result; saved tests/fuzz/regressions/$name/$(basename "$artifact")"
    done
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
  if [ "$KEEP_CORPUS" -eq 1 ] && [ "$result" = ok ]; then
    # The smallest set of inputs that covers every edge the kept corpus and this exploration reached
    # (edges, not hit counts: -use_counters=0 keeps the corpus a few hundred files a target).
    kept_dir="$ROOT/tests/fuzz/corpus/$name"
    mkdir -p "$kept_dir"
    before=$(find "$kept_dir" -type f | wc -l)
    merged="$BUILD/merged/$name"
    rm -rf "$merged"
    mkdir -p "$merged"
    if "$exe" -merge=1 -use_counters=0 -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
         "$merged" "$kept_dir" "$corpus" >>"$log" 2>&1; then
      rm -rf "$kept_dir"
      mv "$merged" "$kept_dir"
      result="$result; kept corpus $before -> $(find "$kept_dir" -type f | wc -l)"
    else
      result="merge FAILED ($log)"
      status=1
    fi
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$nseeds" "$kept" "$regressions" "$seconds" "$execs" "$result"
done
exit $status
