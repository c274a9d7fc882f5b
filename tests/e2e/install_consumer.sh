#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then programs built against that install the way users build them:
# examples/transcribe.c through pkg-config; examples/three_lines.cpp, stream_stdin.c and the consumer's own
# exceptions.cpp through find_package(qasr) (tests/e2e/consumer). Each runs on the demo model and must print its
# transcript; an error path must give the documented status (or exception type). libqasr.so must export the public
# APIs and nothing else.
#   install_consumer.sh BUILD_DIR SOURCE_DIR        (ctest e2e.install; exit 77 = skipped)
set -euo pipefail
b=${1:?build dir}; src=$(cd "${2:?source dir}" && pwd)
demo=$src/models/demo
if [ ! -f "$demo/tokenizer.json" ]; then
    echo "SKIP: the demo model's tokenizer is not set up (scripts/setup_tokenizer.sh; cp .cache/qasr/tokenizer/* models/demo/)"
    exit 77
fi
tmp=$(mktemp -d /tmp/qasr-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
p=$tmp/prefix
cmake --install "$b" --prefix "$p" > "$tmp/install.log"
so=$(find "$p" -name 'libqasr.so' | head -1)
[ -n "$so" ] || { echo "FAIL: no libqasr.so installed (QASR_SHARED=OFF?)"; cat "$tmp/install.log"; exit 1; }
for f in bin/qasr include/qasr/qasr.h include/qasr/qasr.hpp include/qasr/error.hpp; do
    [ -e "$p/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
want=$(cat "$src/samples/demo_en.txt")
check() { # NAME OUTPUT
    if [ "$2" != "$want" ]; then echo "FAIL: $1 printed '$2', want '$want'"; exit 1; fi
    echo "ok: $1"
}
# 1. the exports: C API, the C++ API's classes and functions, the exceptions' type information — nothing internal
extra=$(nm -D --defined-only -C "$so" | sed -E 's/^[0-9a-f]+ [A-Za-z] //; s/@@?QASR_0$//' |
    grep -vE '^(qasr_[a-z0-9_]+|QASR_0|qasr::(Transcriber|Stream|Aligner|Error|OutOfMemory|TooLong|Cancelled)::.*|qasr::(finish_reason_name|to_srt|to_vtt|to_timestamped_text|summary_line|set_log_sink|system_info)(\[abi:cxx11\])?\(.*|(typeinfo|typeinfo name|vtable) for qasr::(Error|OutOfMemory|TooLong|Cancelled))$' || true)
if [ -n "$extra" ]; then echo "FAIL: libqasr.so exports more than the public APIs:"; echo "$extra" | head -20; exit 1; fi
echo "ok: $(nm -D --defined-only "$so" | wc -l) exported symbols, all public API"
# 2. C through pkg-config
pc=$(dirname "$(find "$p" -name qasr.pc | head -1)")
export PKG_CONFIG_PATH=$pc
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/transcribe" "$src/examples/transcribe.c" $(pkg-config --cflags --libs qasr)
export LD_LIBRARY_PATH=$(dirname "$so")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ver=$(pkg-config --modversion qasr)
usage=$("$tmp/transcribe" 2>&1 || true)
grep -qF "(qasr $ver)" <<< "$usage" || { echo "FAIL: qasr_version() is not the .pc's $ver"; exit 1; }
"$p/bin/qasr" version | head -1 | grep -qF "qasr $ver" || { echo "FAIL: the installed CLI is not qasr $ver"; exit 1; }
check "C program (pkg-config)" "$("$tmp/transcribe" "$demo" "$src/samples/demo_en.wav" 2> "$tmp/err")"
# FFmpeg's module (a build with FFmpeg): installed in LIBDIR/qasr, where the installed CLI and libqasr.so find it —
# not in the build tree, which they would also look in
if [ -e "$b/lib/qasr/libqasr_ffmpeg.so" ]; then
    mod=$(find "$p" -path '*/qasr/libqasr_ffmpeg.so' | head -1)
    [ -n "$mod" ] || { echo "FAIL: FFmpeg's module not installed"; exit 1; }
    mod=$(cd "$(dirname "$mod")" && pwd -P)/libqasr_ffmpeg.so
    "$p/bin/qasr" version | grep -qF "FFmpeg decoding yes ($mod)" ||
        { echo "FAIL: the installed CLI does not load $mod: $("$p/bin/qasr" version | head -2 | tail -1)"; exit 1; }
    printf '#include <qasr/qasr.h>\n#include <stdio.h>\nint main(void) { puts(qasr_system_info()); return 0; }\n' > "$tmp/info.c"
    cc -std=c11 -o "$tmp/info" "$tmp/info.c" $(pkg-config --cflags --libs qasr)
    "$tmp/info" | grep -qF "FFmpeg decoding yes ($mod)" ||
        { echo "FAIL: libqasr.so does not load $mod: $("$tmp/info" | head -2 | tail -1)"; exit 1; }
    echo "ok: FFmpeg's module $mod loaded by the installed CLI and libqasr.so"
fi
if [ -e "$b/lib/qasr/libqasr_capture.so" ]; then # the microphone module (a build with SDL2)
    mod=$(find "$p" -path '*/qasr/libqasr_capture.so' | head -1)
    [ -n "$mod" ] || { echo "FAIL: the microphone module not installed"; exit 1; }
    mod=$(cd "$(dirname "$mod")" && pwd -P)/libqasr_capture.so
    "$p/bin/qasr" version | grep -qF "SDL2) yes ($mod)" ||
        { echo "FAIL: the installed CLI does not load $mod: $("$p/bin/qasr" version | tail -1)"; exit 1; }
    echo "ok: the microphone module $mod loaded by the installed CLI"
fi
grep -q "^language English" "$tmp/err" || { echo "FAIL: no language line"; cat "$tmp/err"; exit 1; }
set +e
"$tmp/transcribe" "$tmp/no-such-model" "$src/samples/demo_en.wav" 2> "$tmp/err"; rc=$?
set -e
[ $rc = 1 ] && grep -q "model" "$tmp/err" || { echo "FAIL: a missing model gave rc $rc: $(cat "$tmp/err")"; exit 1; }
echo "ok: a missing model directory: $(head -1 "$tmp/err")"
# 3. C++ (and C) through find_package(qasr), as C++17
cmake -S "$src/tests/e2e/consumer" -B "$tmp/cxx" -DCMAKE_PREFIX_PATH="$p" -DQASR_EXAMPLES="$src/examples" \
    -DCMAKE_BUILD_TYPE=Release > "$tmp/cxx.log" 2>&1 || { cat "$tmp/cxx.log"; exit 1; }
cmake --build "$tmp/cxx" -j2 >> "$tmp/cxx.log" 2>&1 || { cat "$tmp/cxx.log"; exit 1; }
check "C++ program (find_package)" "$("$tmp/cxx/three_lines" "$demo" "$src/samples/demo_en.wav" | head -1)"
"$tmp/cxx/exceptions" "$demo" "$src/samples/demo_en.wav" > "$tmp/exc" 2>&1 || { echo "FAIL: exceptions:"; cat "$tmp/exc"; exit 1; }
grep -q "^qasr::Error: \[loader\]" "$tmp/exc" && grep -q "^qasr::Cancelled: .*cancelled" "$tmp/exc" ||
    { echo "FAIL: the public exception types were not caught:"; cat "$tmp/exc"; exit 1; }
check "C++ exceptions by their public types (find_package)" "$(tail -1 "$tmp/exc")"
final=$(python3 - "$src/samples/demo_en.wav" <<'PY' | "$tmp/cxx/stream_stdin" "$demo" | grep '^final' | tail -1
import sys, wave
w = wave.open(sys.argv[1]); sys.stdout.buffer.write(w.readframes(w.getnframes()))
PY
)
check "C streaming program (find_package)" "$(echo "$final" | sed -E 's/^final +//; s/\[\]$//')"
