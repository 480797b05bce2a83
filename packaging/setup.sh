#!/usr/bin/env bash
# One-command setup for KV Workbench on Debian 12: installs every package the project needs,
# configures and builds with CMake + Ninja, then runs the workbench or the test suite.
#
#   packaging/setup.sh --run     install, build, run the workbench
#   packaging/setup.sh --test    install, build, run the whole CTest suite
#   packaging/setup.sh --build   install and build only
#
# Runs apt-get as root (directly, or through sudo when started as another user).
# KVWB_BUILD_DIR overrides the build directory (default: build/ in the source tree).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${KVWB_BUILD_DIR:-$ROOT/build}"
MODE="${1:---build}"

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  qt6-base-dev qt6-base-dev-tools qt6-charts-dev libqt6opengl6-dev libgl-dev
  libtorch-dev
  # LibTorch otherwise links the reference BLAS: matmuls run ~15x slower.
  libopenblas0-pthread
  libhdf5-dev hdf5-tools zlib1g-dev libhnswlib-dev libfmt-dev nlohmann-json3-dev
  # run archives (core/settings/run_archive.cpp)
  libarchive-dev
  libsentencepiece-dev sentencepiece libpcre2-dev libicu-dev libssl-dev
  wordnet-base
  # the Redis store under the cache tiers (core/cache/redis_store.cpp); the tests start their own
  # redis-server on a loopback port
  libhiredis-dev redis-server
  # the demo scripts' tables from kvwb's JSON (projects/demo/make-fleet-report.sh)
  jq
  # the fuzz targets (libFuzzer, packaging/fuzz.sh)
  clang
  # the format lint (CTest lint.format)
  clang-format
  # the report's rendering test (ui.report_builder): the HTML in a headless Chromium, the PDF's pages
  # as images
  chromium-headless-shell poppler-utils
  # the Debian package (packaging/build-deb.sh, CTest packaging.deb): CPack's DEB generator needs
  # file, its dependency scan dpkg-shlibdeps
  dpkg-dev file
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

build() {
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build "$BUILD" -j"$(nproc)"
}

# --test runs stages and prints each one's wall time at the end (docs/development.md has the
# table and how to run one stage alone). A failing stage stops the run after printing the table.
STAGES=()
stage_table() {
  printf '\n| stage | seconds | result |\n|:--|--:|:--|\n'
  local row
  for row in "${STAGES[@]}"; do printf '%s\n' "$row"; done
}
stage() {
  local name="$1" start end rc=0
  shift
  echo "setup: stage $name"
  start=$(date +%s)
  "$@" || rc=$?
  end=$(date +%s)
  if [ "$rc" -eq 0 ]; then
    STAGES+=("| $name | $((end - start)) | ok |")
  else
    STAGES+=("| $name | $((end - start)) | FAILED (exit $rc) |")
    stage_table
    exit "$rc"
  fi
}
# ctest, keeping its summary line ("100% tests passed, 0 tests failed out of 77") for the table.
run_ctest() {
  local log="$1"
  shift
  local rc=0
  ctest "$@" --output-on-failure 2>&1 | tee "$log" || rc=$? # pipefail: ctest's status
  return "$rc"
}
# The sanitizer tree's tests: ASan without leak checks (Qt's and LibTorch's start-up allocations),
# UBSan stopping at its first report except for the suppressed third-party headers.
run_sanitized_ctest() {
  ASAN_OPTIONS=detect_leaks=0 \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$ROOT/tests/support/ubsan.supp" \
    run_ctest "$@"
}
ctest_summary() {
  grep -h -o '[0-9]*% tests passed, [0-9]* tests failed out of [0-9]*' "$1" 2>/dev/null | tail -1
}

SAN="${KVWB_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
export KVWB_FUZZ_BUILD_DIR="$SAN"
LOGS="$BUILD/stage-logs"

case "$MODE" in
  --build)
    install_packages
    build
    ;;
  --test)
    total_start=$(date +%s)
    stage "apt (packages)" install_packages
    mkdir -p "$LOGS"
    # 1. The main tree: the window, every subcommand, the headless programs (build/headless/) and
    #    every test. Tests set their own torch thread counts; two run at a time.
    stage "configure (main)" cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
    stage "build (main)" cmake --build "$BUILD" -j"$(nproc)"
    stage "test (main: core, gpu, integration, headless, ui, app, lint, packaging)" \
      run_ctest "$LOGS/ctest-main.log" --test-dir "$BUILD" -j2
    # 2. The sanitizer tree (clang, AddressSanitizer + UBSan): core/ once, its tests and the fuzz
    #    targets (the integration tests run kvwb, whose LibTorch and SentencePiece clash under
    #    ASan: docs/model-formats.md).
    stage "configure (sanitizers)" env CC=clang CXX=clang++ \
      cmake -S "$ROOT" -B "$SAN" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVWB_FUZZ=ON
    stage "build (sanitizers)" cmake --build "$SAN" -j"$(nproc)"
    stage "test (core under ASan + UBSan)" \
      run_sanitized_ctest "$LOGS/ctest-sanitizers.log" --test-dir "$SAN" -j2 -L core
    # 3. The fuzz targets replay their seed corpora and every kept regression input: deterministic.
    #    Exploration is `packaging/fuzz.sh --explore SECONDS`, by hand before a change is submitted.
    stage "fuzz (replay seeds + regressions)" "$ROOT/packaging/fuzz.sh" --no-build
    stage_table
    echo "main tree: $(ctest_summary "$LOGS/ctest-main.log")"
    echo "sanitizer tree: $(ctest_summary "$LOGS/ctest-sanitizers.log")"
    echo "setup: --test passed in $(( $(date +%s) - total_start )) s"
    ;;
  --run)
    install_packages
    build
    shift || true
    if [ "$#" -gt 0 ]; then
      exec "$BUILD/kvwb" "$@"
    fi
    # The workbench window on the demo project (needs a display; `--run info MODEL` etc. run a
    # headless subcommand instead).
    exec "$BUILD/kvwb" open "$ROOT/projects/demo/demo.kvwb"
    ;;
  *)
    echo "usage: $0 [--build|--test|--run [kvwb arguments...]]" >&2
    exit 2
    ;;
esac
