#!/usr/bin/env bash
# Downloads the Debian 12 packages a headless kvwb build needs (Qt 6 Core and Test, HDF5, ICU,
# fmt, nlohmann-json, hnswlib, PCRE2, SentencePiece, OpenSSL, zlib, pkgconf) into tests/device/debs/
# (git-ignored, about 37 MB), for a GPU machine that has a compiler, CMake, CUDA and a Python torch
# but none of these and no network. tests/device/run.sh unpacks them there under /tmp/kvwb-deps,
# never into /. Run on a Debian 12 machine with apt sources; nothing is installed here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest="$here/debs"
mkdir -p "$dest"
packages=(
  qt6-base-dev qt6-base-dev-tools qmake6 qmake6-bin libqt6core6 libqt6test6 libdouble-conversion3 libb2-1
  libpcre2-16-0 libpcre2-8-0 libpcre2-32-0 libpcre2-posix3 libpcre2-dev libglib2.0-0
  libicu72 libicu-dev libhdf5-dev libhdf5-103-1 libsz2 libaec0 libaec-dev zlib1g zlib1g-dev
  libfmt-dev libfmt9 nlohmann-json3-dev libhnswlib-dev libsentencepiece-dev libsentencepiece0
  libprotobuf-lite32 libssl-dev libssl3 pkgconf pkgconf-bin libpkgconf3
)
cd "$dest"
rm -f ./*.deb
apt-get download "${packages[@]}"
echo "fetch-deps: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in $dest"
