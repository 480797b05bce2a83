#!/usr/bin/env bash
# The CUDA check, for a machine with an NVIDIA GPU (CI has none; docs/engine.md, "CUDA"):
#  1. builds kvwb headless (KVWB_HEADLESS: subcommands only) against the machine's CUDA LibTorch,
#     the one inside its Python torch (python3 -c 'import torch; print(torch.utils.cmake_prefix_path)');
#  2. runs the gpu tests (tst_gpu_engine's cudaMatchesCpu runs instead of skipping);
#  3. prints the CPU-vs-CUDA parity table (tests/gpu/device/tst_parity.cpp: logits, KV read back,
#     transfer and greedy agreement for f32, bf16 and f16, each within its stated tolerance);
#  4. runs `kvwb bench --device cuda` on the demo pair and on a 135M-parameter model (preset 135m),
#     each dtype, with the CPU's f32 beside it;
#  5. (geometries) `kvwb bench` at the geometries of Qwen3-0.6B, Qwen3-1.7B and Llama-3.2-3B and
#     `kvwb bench-transfer` for the pairs of docs/scale.md, bf16 on CUDA, 512 to 16k tokens.
# Libraries the machine lacks come from Debian 12 packages downloaded beforehand by
# tests/device/fetch-deps.sh into tests/device/debs/ (carried with the working tree); they are
# unpacked under /tmp/kvwb-deps and used from there, never installed into /. Results go to $OUT
# (or build-device/out): parity.md, bench.md, geometries.md, ctest.log, build.log.
#
#   tests/device/run.sh            # everything
#   KVWB_DEVICE_STEPS="build parity" tests/device/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build="$repo/build-device"
out="${OUT:-$build/out}"
root=/tmp/kvwb-deps
steps="${KVWB_DEVICE_STEPS:-build test parity bench geometries}"
mkdir -p "$out" "$build"
has() { [[ " $steps " == *" $1 "* ]]; }
say() { printf '\n== %s\n' "$*"; }

python=${PYTHON:-python3}
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
      "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# Debian packages -> /tmp/kvwb-deps (absolute links re-pointed inside it)
if compgen -G "$here/debs/*.deb" >/dev/null; then
  mkdir -p "$root"
  for f in "$here"/debs/*.deb; do dpkg-deb -x "$f" "$root"; done
  find "$root" -type l -lname '/*' | while read -r l; do ln -sfn "$root$(readlink "$l")" "$l"; done
  lib="$root/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$lib:$root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$root/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$root"
  inc="-isystem $root/usr/include -isystem $root/usr/include/x86_64-linux-gnu"
  export CFLAGS="$inc" CXXFLAGS="$inc"
  export LDFLAGS="-L$lib -Wl,-rpath-link,$lib -Wl,-rpath-link,$root/lib/x86_64-linux-gnu"
  pkgconf=()
  command -v pkg-config >/dev/null || pkgconf=(-DPKG_CONFIG_EXECUTABLE="$root/usr/bin/pkgconf")
  deps=(-DCMAKE_FIND_ROOT_PATH="$root" -DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu
        -DHDF5_C_INCLUDE_DIR="$root/usr/include/hdf5/serial" "${pkgconf[@]}")
  for m in PACKAGE LIBRARY INCLUDE PROGRAM; do deps+=(-DCMAKE_FIND_ROOT_PATH_MODE_$m=BOTH); done
else
  deps=()
fi

if has build; then
  say "build (headless, LibTorch from $torch_prefix)"
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$repo" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DKVWB_HEADLESS=ON \
    -DCMAKE_PREFIX_PATH="$torch_prefix" "${deps[@]}" 2>&1 | tee "$out/build.log" | tail -25
  cmake --build "$build" -j "$(nproc)" 2>&1 | tee -a "$out/build.log" | grep -E "error|warning: unused|FAILED" | head -40 || true
  test -x "$build/kvwb" || { echo "run.sh: the build failed (build.log)"; tail -40 "$out/build.log"; exit 1; }
fi

if has test; then
  say "gpu tests"
  ctest --test-dir "$build" -L gpu --output-on-failure -j 4 2>&1 | tee "$out/ctest.log" | tail -15 || true
  grep -E "cudaMatchesCpu" -r "$build/Testing/Temporary/LastTest.log" | head -3 || true
fi

if has parity; then
  say "CPU-vs-CUDA parity"
  KVWB_PARITY_TABLE="$out/parity.md" "$build/tests/tst_gpu_parity" 2>&1 | tee "$out/parity.log" |
    grep -E "^\||FAIL|Loc|Totals" || true
fi

if has bench; then
  say "kvwb bench --device cuda"
  models="$build/bench-models"
  [ -d "$models/135m" ] || "$build/kvwb" make-model --preset 135m --out "$models/135m" >/dev/null
  {
    for m in "$repo/projects/demo/models/a" "$repo/projects/demo/models/b" "$models/135m"; do
      echo "### $(basename "$m")"
      "$build/kvwb" bench "$m" --device cpu --dtype f32 --lengths 128,512 --repeats 3 2>&1 | sed 's/^/cpu f32: /'
      for t in f32 bf16 f16; do
        "$build/kvwb" bench "$m" --device cuda --dtype "$t" --lengths 128,512,2048 --repeats 5 2>&1 |
          sed "s/^/cuda $t: /"
      done
    done
  } | tee "$out/bench.md"
fi
if has geometries; then
  # The real models' geometries (random weights, bf16): CUDA prefill and decode from 512 to 16k
  # tokens, and conversion against B's prefill for the pairs of docs/scale.md.
  say "kvwb bench / bench-transfer --device cuda at 0.6B-3B"
  models="$build/bench-models"
  {
    for p in qwen3-0.6b qwen3-1.7b llama3.2-3b; do
      [ -d "$models/$p" ] || "$build/kvwb" make-model --preset "$p" --weight-dtype BF16 --out "$models/$p" >/dev/null
      echo "### $p"
      "$build/kvwb" bench "$models/$p" --device cuda --dtype bf16 --lengths 512,4096,16384 \
        --decode-tokens 32 --repeats 3 2>&1 | sed 's/^/cuda bf16: /'
    done
    for pair in "qwen3-0.6b qwen3-1.7b" "llama3.2-3b qwen2.5-3b"; do
      read -r a b <<<"$pair"
      echo "### $a -> $b"
      "$build/kvwb" bench-transfer --preset-a "$a" --preset-b "$b" --device cuda --dtype bf16 -k 4 \
        --lengths 512,4096,16384 --reps 3 2>&1 | sed 's/^/cuda bf16: /'
    done
  } | tee "$out/geometries.md"
fi

echo
echo "run.sh: done; results in $out"
