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
  libsentencepiece-dev sentencepiece libpcre2-dev libicu-dev libssl-dev
  wordnet-base
  # the Redis store under the cache tiers (core/cache/redis_store.cpp); the tests start their own
  # redis-server on a loopback port
  libhiredis-dev redis-server
  # the demo scripts' tables from kvwb's JSON (projects/demo/make-fleet-report.sh)
  jq
  # the fuzz targets (libFuzzer, packaging/fuzz.sh)
  clang
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

case "$MODE" in
  --build)
    install_packages
    build
    ;;
  --test)
    install_packages
    build
    # Tests set their own torch thread counts; run two at a time on small machines.
    ctest --test-dir "$BUILD" --output-on-failure -j2
    # The headless build (no window, no report writer: Qt Core only), its own tests; the compiler
    # cache makes core/ and gpu/ nearly free after the build above.
    HEADLESS="${KVWB_HEADLESS_BUILD_DIR:-$ROOT/build-headless}"
    cmake -S "$ROOT" -B "$HEADLESS" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVWB_HEADLESS=ON >/dev/null
    cmake --build "$HEADLESS" -j"$(nproc)"
    ctest --test-dir "$HEADLESS" --output-on-failure -j2
    # The sanitizer job: core/ and its tests again under AddressSanitizer + UBSan (the integration
    # tests run kvwb, whose LibTorch and SentencePiece clash under ASan: docs/model-formats.md).
    ASAN="${KVWB_ASAN_BUILD_DIR:-$ROOT/build-asan}"
    cmake -S "$ROOT" -B "$ASAN" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVWB_SANITIZE=ON >/dev/null
    cmake --build "$ASAN" -j"$(nproc)" --target $(cd "$ROOT/tests" && find core -name 'tst_*.cpp' -printf '%f\n' | sed 's/^tst_/tst_core_/; s/\.cpp$//')
    ASAN_OPTIONS=detect_leaks=0 \
      UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$ROOT/tests/support/ubsan.supp" \
      ctest --test-dir "$ASAN" --output-on-failure -j2 -L core
    # The fuzz targets, bounded (packaging/fuzz.sh).
    "$ROOT/packaging/fuzz.sh"
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
