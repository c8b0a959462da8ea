#!/usr/bin/env bash
# Builds the fuzzers with clang (build-fuzz/, fuzz/CMakeLists.txt names them) and runs each for a bounded time:
# half of SECONDS each (the daemon's request decoder, its store protocol with no socket, the copy port's request,
# the hook's messages and the progress beats).
#   scripts/fuzz.sh [SECONDS]     (default 30)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# ccache keys on paths relative to the checkout: a fresh clone's tree reuses another clone's objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
# With -g, ccache also keys on the working folder (debug info names it) unless told not to: the folder differs
# from clone to clone, so without this a debug tree (ASan, fuzz) is rebuilt whole in every fresh clone.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
SECONDS_TO_RUN="${1:-30}"
DIR="$ROOT/build-fuzz"
TARGETS=(request_decoder_fuzzer store_connection_fuzzer copy_port_request_fuzzer hook_message_fuzzer beat_fuzzer)
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHRUN_FUZZ=ON \
  -DMESHRUN_BUILD_TRAINER=OFF -DMESHRUN_BUILD_TESTS=OFF >/dev/null
cmake --build "$DIR" --target "${TARGETS[@]}" >/dev/null
# Seeds: a few valid inputs of each, so the fuzzers start from real framing.
seed() {  # seed TARGET NAME BYTES (printf format)
  mkdir -p "$DIR/corpus/$1"
  # shellcheck disable=SC2059  # the bytes are a format on purpose
  printf "$3" > "$DIR/corpus/$1/$2"
}
seed request_decoder_fuzzer validate '\x00\xce\xf7\x85\x3c'
seed request_decoder_fuzzer set '\x01\x02\0\0\0\0\0\0\0/k\x01\0\0\0\0\0\0\0v'
seed request_decoder_fuzzer wait '\x06\x01\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0/k'
# store_connection_fuzzer: a piece of 19 bytes to connection 0 (a WAIT on /k), 20 to connection 1 (SET /k v).
seed store_connection_fuzzer wait_set '\x13\x06\x01\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0/k\x94\x01\x02\0\0\0\0\0\0\0/k\x01\0\0\0\0\0\0\0v'
seed copy_port_request_fuzzer fetch '\x3e\0\0\0{"op":"fetch","run":"r","rank":0,"step":5,"client_nonce":"0a"}'
seed copy_port_request_fuzzer push '\x2d\0\0\0{"op":"push","run":"r","rank":1,"bytes":8192}'
seed copy_port_request_fuzzer hello '{"op":"hello","rank":1,"world_size":2,"slot_bytes":16384,"digest":7}'
seed copy_port_request_fuzzer plan '{"op":"plan","steps_done":4,"candidates":[{"step":4,"world_size":2}]}'
seed hook_message_fuzzer status 'fr status 0:12:11 my:pg:3:3'
seed hook_message_fuzzer frames 'fr frames {"frames": ["/t.py:14 in save"], "where": "save at t.py:14"}'
seed hook_message_fuzzer arrivals 'fr arrivals 11 20 10 1795000000000000000 450000000 0'
seed hook_message_fuzzer dump '{"fr":"on","groups":{"0":{"ranks":[0,1],"last_enqueued":5,"last_completed":4}},"entries":[{"group":"0","seq":5,"op":"all_reduce","frames":[["/t.py",8,"f"]]}]}'
seed hook_message_fuzzer dump_threads '{"fr":"off","pid":7,"threads":[{"tid":7,"name":"MainThread","frames":["/t.py:14 in main"],"where":"main at t.py:14","call":"urlopen"},{"tid":9,"meshrun":true}]}'
seed beat_fuzzer beat 'step=12 loss=2.5 tokens_per_s=1200 compute_s=0.04'
seed beat_fuzzer phase 'step=12 phase=checkpoint'
for target in "${TARGETS[@]}"; do
  seconds=$(((SECONDS_TO_RUN + 1) / 2))
  echo "== $target, $seconds s"
  "$DIR/bin/$target" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 "$DIR/corpus/$target" 2>&1 |
    tail -n 12
done
