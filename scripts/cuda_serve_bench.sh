#!/usr/bin/env bash
# `qasr serve` on the GPU machine against the library's own concurrency, in one call: `qasr bench --clients N`
# (in-process, N threads on one Transcriber) and the HTTP server driven by bench/serve_load with N clients, both on
# the random-weight checkpoint, the same audio and a fixed decode length; then a SIGTERM and the server's exit.
#   OUT=... CLIENTS="1 4 16" bash scripts/cuda_serve_bench.sh BUILD_DIR AUDIO [PRESET] [TOKENS]
# Then the demo model behind a second server: offline requests and live streams (open, push, finish) over HTTP.
# The server's extra libraries (cpp-httplib, OpenSSL, brotli) come from build-carry/srvlib (cuda_env.sh).
set -uo pipefail
b=${1:?build dir}; audio=${2:?audio}; p=${3:-0.6b}; tokens=${4:-40}
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
m=$(checkpoint "$p" "$q")
for n in ${CLIENTS:-1 4 16}; do
    timeout 120 "$q" bench -m "$m" --device cuda --audio "$audio" --ignore-eos --max-new-tokens "$tokens" --runs 5 \
        --warmup 0 --api-warmup --clients "$n" > "$out/bench_clients_$n.txt" 2>&1
    log "bench --clients $n rc=$?: $(grep -iE 'clients|round|latency|throughput' "$out/bench_clients_$n.txt" | tail -3 | tr '\n' ' ')"
done
port=18080
"$q" serve -m "$m" --device cuda --parallel "${PARALLEL:-16}" --port $port > "$out/serve.out" 2> "$out/serve.log" &
pid=$!
for i in $(seq 1 600); do grep -q "listening on" "$out/serve.out" 2>/dev/null && break; sleep 0.1; done
log "server: $(cat "$out/serve.out") (pid $pid, after $((i / 10)) s)"
fields="response_format=verbose_json&ignore_eos=true&max_new_tokens=$tokens"
"$b/bench/serve_load" 127.0.0.1 $port "$audio" 1 1 "$fields" > "$out/serve_first.json" 2>&1
log "first request over HTTP: $(cat "$out/serve_first.json")"
for n in ${CLIENTS:-1 4 16}; do
    per=$(( n >= 16 ? 5 : n >= 4 ? 10 : 20 ))
    timeout 120 "$b/bench/serve_load" 127.0.0.1 $port "$audio" "$n" "$per" "$fields" > "$out/serve_load_$n.json" 2>&1
    log "serve_load $n clients × $per rc=$?: $(cat "$out/serve_load_$n.json")"
done
kill -TERM $pid
for i in $(seq 1 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
wait $pid; log "server exit status $? after SIGTERM; log tail: $(tail -2 "$out/serve.log" | tr '\n' ' ')"
# Live streams over HTTP need a model that stops (EOS): the bundled demo model. Push-to-talk: the finish's latency
# (key release → final text) against an offline request of the same file.
"$q" serve -m models/demo --device cuda --port $((port + 1)) -q > "$out/serve_demo.out" 2> "$out/serve_demo.log" &
pid=$!
for i in $(seq 1 600); do grep -q "listening on" "$out/serve_demo.out" 2>/dev/null && break; sleep 0.1; done
for w in samples/demo_en.wav "$audio"; do
    "$b/bench/serve_load" 127.0.0.1 $((port + 1)) "$w" 1 10 "response_format=verbose_json" > "$out/demo_offline.json" 2>&1
    log "demo model, $w, offline over HTTP: $(cat "$out/demo_offline.json")"
    "$b/bench/serve_load" 127.0.0.1 $((port + 1)) "$w" 1 10 "response_format=verbose_json" stream > "$out/demo_stream.json" 2>&1
    log "demo model, $w, live stream over HTTP (latency = finish): $(tr '\n' ' ' < "$out/demo_stream.json")"
done
kill -TERM $pid; wait $pid; log "demo server exit status $?"
