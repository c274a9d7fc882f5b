# Sourced by the scripts that run on the GPU machine (run_cuda_device.sh, run_cuda_stream.sh, cuda_ab.sh): the
# output folder, the carried non-CUDA libraries and the machine's cuBLAS on the library path, the environment the
# binaries and tests expect (the demo model's tokenizer installed), and `log` (timestamped, also appended to
# $out/summary.txt).
out=${OUT:-/tmp/qasr_out}
mkdir -p "$out"
cub=$(find /usr/local/cuda*/ /opt/torch -name 'libcublas.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/build-carry/lib:${cub:+$(dirname "$cub"):}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# `qasr serve`'s libraries (cpp-httplib, OpenSSL, brotli) last: only what the machine lacks is taken from there
LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/build-carry/srvlib"
export PYTHONUNBUFFERED=1 GOMP_SPINCOUNT=10000 QASR_TOKENIZER_DIR=$PWD/.cache/qasr/tokenizer QASR_DEMO_DIR=$PWD/models/demo
log() { echo "[$(date +%T)] $*" | tee -a "$out/summary.txt"; }
cp .cache/qasr/tokenizer/* models/demo/ 2>/dev/null # the demo model's tokenizer (GPU stream test, check_qasr.py)
# checkpoint PRESET QASR: the random-weight bf16 checkpoint of PRESET in /tmp/qm/PRESET/bf16 (made with QASR if absent)
checkpoint() {
    local m=/tmp/qm/$1/bf16
    [ -f "$m/model.safetensors" ] || "$2" dev make-random --preset "$1" --layout hf --tokenizer .cache/qasr/tokenizer "$m" >> "$out/setup.log" 2>&1
    echo "$m"
}
