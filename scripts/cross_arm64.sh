#!/usr/bin/env bash
# The portable build on 64-bit ARM, from a Debian 12 x86-64 machine: installs the cross compiler, the arm64
# libraries (multiarch) and qemu, cross-builds everything (library, CLI, every test binary) into build-arm64 with
# -Werror, and runs smoke tests under qemu-aarch64: `qasr version`, the parsers, tokenizer, log-mel, WAV, config and
# safetensors unit tests, the aligner's word splitting, timestamp repair and config detection, and the ITN accuracy cases. The model-level tests are left to real ARM hardware: qemu
# emulates floating point in software (the demo model's 3 s transcription did not finish in 5 minutes on the 2-core
# machine; the log-mel of 25 s in Mel.BlocksAndThreadsGiveTheSameFrames is left out for the same reason), and
# CTEST_ARGS runs more of the suite where that is acceptable (ctest's emulator is set).
#   scripts/cross_arm64.sh             [CTEST_ARGS="-L unit"]      (CI runs it after the test suite: .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
if ! dpkg -s g++-aarch64-linux-gnu qemu-user libpcre2-dev:arm64 libutf8proc-dev:arm64 libsoxr-dev:arm64 \
        libgtest-dev:arm64 >/dev/null 2>&1; then
    # exit 77 (skipped) when the packages cannot be had: that is the machine's state, not the code's
    $sudo dpkg --add-architecture arm64 || { echo "SKIP: cannot add the arm64 architecture"; exit 77; }
    $sudo apt-get update -qq || { echo "SKIP: apt-get update failed"; exit 77; }
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends g++-aarch64-linux-gnu qemu-user \
        libpcre2-dev:arm64 libutf8proc-dev:arm64 libsoxr-dev:arm64 libgtest-dev:arm64 nlohmann-json3-dev >/dev/null ||
        { echo "SKIP: the arm64 cross packages could not be installed"; exit 77; }
fi
cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
    -DQASR_FFMPEG=OFF -DQASR_BLAS=OFF -DQASR_SERVER=OFF -DQASR_SDL=OFF -DQASR_CUDA=OFF
cmake --build build-arm64 -j"$(nproc)"
file build-arm64/tools/qasr
# One OpenMP thread: under qemu-user (Debian 12's 7.2) a parallel region of libgomp's team never finished (the log-mel
# of 1 s ran over 5 minutes instead of 1.6 s); the team is exercised by the native runs
run() { OMP_NUM_THREADS=1 qemu-aarch64 -L /usr/aarch64-linux-gnu "$@"; }
run build-arm64/tools/qasr version
run build-arm64/tests/unit/qasr_unit_tests --gtest_brief=1 --gtest_filter='Tokenizer.*:Utf8.*:Wav.*:AudioBytes.*:Resample.*:Mel.*:Encoder.*:Parse.*:Repetition.*:Languages.*:LongAudio.*:Safetensors.*:Config.*:AlignWords.*:AlignTimestamps.*:AlignerConfig.*:-Mel.BlocksAndThreadsGiveTheSameFrames'
ctest --test-dir build-arm64 --output-on-failure -R itn_nemo_accuracy
if [ -n "${CTEST_ARGS:-}" ]; then ctest --test-dir build-arm64 --output-on-failure $CTEST_ARGS; fi
