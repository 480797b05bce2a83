#!/usr/bin/env bash
# Builds the Debian package: a Release build in build-deb/ (no tests), then `cpack -G DEB`.
# The package (kvwb_<version>-1_<arch>.deb) lands in build-deb/; install it with
#   sudo apt install ./build-deb/kvwb_*.deb
# It holds bin/kvwb, lib/kvwb/kvwb-engine, lib/kvwb/libkvwb_spm.so, the desktop entry and icon,
# and the demo project in share/kvwb/projects/demo (packaging/CMakeLists.txt); its Depends come
# from dpkg-shlibdeps. Needs the packages of packaging/setup.sh (dpkg-dev and file among them).
# KVWB_DEB_BUILD_DIR overrides the build directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${KVWB_DEB_BUILD_DIR:-$ROOT/build-deb}"

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVWB_BUILD_TESTS=OFF
cmake --build "$BUILD" -j"$(nproc)"
(cd "$BUILD" && cpack -G DEB)
ls -l "$BUILD"/*.deb
