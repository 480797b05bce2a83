#!/usr/bin/env bash
# CTest packaging.deb: packs the already-built tree BUILD into a .deb (cpack, into a scratch
# folder), checks its control fields and contents, unpacks it with dpkg-deb -x (no root, no
# network) and runs the unpacked binaries with LD_LIBRARY_PATH unset: the front end, the engine it
# must find in ../lib/kvwb/, the SentencePiece shim beside the engine and the installed demo
# project (core/util/install_layout.h), none of them the build tree's.
#
#   packaging/test-deb.sh BUILD [CPACK]
set -euo pipefail

BUILD="$(cd "$1" && pwd)"
CPACK="${2:-cpack}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/kvwb-deb.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "packaging.deb: $*" >&2; exit 1; }
for tool in dpkg-deb dpkg-shlibdeps file; do
  command -v "$tool" >/dev/null || fail "$tool is missing (packaging/setup.sh installs dpkg-dev and file)"
done

"$CPACK" -G DEB --config "$BUILD/CPackConfig.cmake" -B "$TMP/out" >"$TMP/cpack.log" 2>&1 ||
  { cat "$TMP/cpack.log" >&2; fail "cpack failed"; }
DEBS=("$TMP"/out/*.deb)
if [ "${#DEBS[@]}" -ne 1 ] || [ ! -f "${DEBS[0]}" ]; then fail "expected one .deb in $TMP/out"; fi
DEB="${DEBS[0]}"
echo "package: $(basename "$DEB"), $(du -k "$DEB" | cut -f1) KiB"

dpkg-deb -I "$DEB" >"$TMP/info"
for field in Package Version Architecture Maintainer Section Depends Description; do
  grep -q "^ $field: ." "$TMP/info" || { cat "$TMP/info" >&2; fail "control field $field missing"; }
done
# dpkg-shlibdeps found the shared libraries the binaries load: Qt, LibTorch, SentencePiece.
for dep in libqt6core6 libqt6widgets6 libtorch libsentencepiece; do
  grep "^ Depends:" "$TMP/info" | grep -q "$dep" || { cat "$TMP/info" >&2; fail "Depends lacks $dep"; }
done

dpkg-deb -c "$DEB" >"$TMP/contents"
for f in usr/bin/kvwb usr/lib/kvwb/kvwb-engine usr/lib/kvwb/libkvwb_spm.so \
  usr/share/applications/kvwb.desktop usr/share/icons/hicolor/scalable/apps/kvwb.svg \
  usr/share/kvwb/projects/demo/demo.kvwb usr/share/kvwb/projects/demo/models/a/model.safetensors \
  usr/share/kvwb/projects/demo/models/b/tokenizer.model usr/share/kvwb/projects/demo/workloads/demo.jsonl \
  usr/share/kvwb/projects/demo/models/b2/model.safetensors usr/share/kvwb/projects/demo/models/c/tokenizer.model; do
  grep -q " \./$f\$" "$TMP/contents" || fail "package lacks /$f"
done
# Everything under /usr; none of the demo's training leftovers or experiment files.
if grep -v ' \./$' "$TMP/contents" | grep -qv ' \./usr/'; then fail "package holds files outside /usr"; fi
if grep -q 'train_state\|tokenizer_corpus\|\.h5$' "$TMP/contents"; then fail "package holds demo leftovers"; fi

ROOT="$TMP/root"
dpkg-deb -x "$DEB" "$ROOT"
grep -q '^Exec=kvwb' "$ROOT/usr/share/applications/kvwb.desktop" || fail "desktop entry has no Exec=kvwb"
DEMO="$ROOT/usr/share/kvwb/projects/demo"
# Nothing may lead the unpacked binaries to the build tree's files.
run() { env -u LD_LIBRARY_PATH -u KVWB_SPM_LIBRARY -u LD_PRELOAD "$@"; }

run "$ROOT/usr/bin/kvwb" --help >"$TMP/help" || fail "kvwb --help failed"
grep -q "generate" "$TMP/help" || fail "kvwb --help lists no subcommands"

run "$ROOT/usr/bin/kvwb" info "$DEMO/models/a" >"$TMP/info.json" || fail "kvwb info failed"
grep -q '^{' "$TMP/info.json" || { cat "$TMP/info.json" >&2; fail "kvwb info printed no JSON"; }
grep -q "\"$DEMO/models/a\"" "$TMP/info.json" || { cat "$TMP/info.json" >&2; fail "kvwb info names no model"; }

# The engine (LibTorch) from lib/kvwb/ beside bin/, and the SentencePiece shim from beside the
# engine: the loader's own trace says which files it mapped (the engine keeps the front end's pid
# and argv, so the trace names it as argv[0], bin/kvwb). Without the unpacked engine, kvwb must
# name the unpacked path as missing rather than find another one.
mv "$ROOT/usr/lib/kvwb/kvwb-engine" "$TMP/kvwb-engine"
if run "$ROOT/usr/bin/kvwb" generate --help >/dev/null 2>"$TMP/missing"; then fail "kvwb ran an engine other than the unpacked one"; fi
grep -q "no $ROOT/usr/bin/kvwb-engine or $ROOT/usr/lib/kvwb/kvwb-engine" "$TMP/missing" ||
  { cat "$TMP/missing" >&2; fail "kvwb without its engine did not name the unpacked paths"; }
mv "$TMP/kvwb-engine" "$ROOT/usr/lib/kvwb/kvwb-engine"
run env LD_DEBUG=files LD_DEBUG_OUTPUT="$TMP/ld" "$ROOT/usr/bin/kvwb" generate --model "$DEMO/models/b" \
  --prompt "what is a dog" --max-tokens 2 --threads 1 --json >"$TMP/generate.json" ||
  fail "kvwb generate failed"
grep -q '"output_ids"' "$TMP/generate.json" || { cat "$TMP/generate.json" >&2; fail "kvwb generate printed no output ids"; }
cat "$TMP"/ld.* >"$TMP/ld.all"
grep -q "file=libtorch_cpu\.so[.0-9]* .*needed by" "$TMP/ld.all" || fail "kvwb generate loaded no LibTorch"
grep -q "file=$ROOT/usr/lib/kvwb/libkvwb_spm.so " "$TMP/ld.all" || fail "the engine did not load the unpacked libkvwb_spm.so"

# The demo project of the install, not the source tree's: bench-capture's default models.
run "$ROOT/usr/bin/kvwb" bench-capture --lengths 8 --prompts 1 --threads 1 --dir "$TMP" >"$TMP/bench" ||
  fail "kvwb bench-capture failed"
grep -q "A $DEMO/models/a, B $DEMO/models/b" "$TMP/bench" || { cat "$TMP/bench" >&2; fail "bench-capture did not default to the installed demo models"; }
echo "packaging.deb: ok"
