#!/usr/bin/env bash
# Builds the request-decoder fuzzer with clang (build-fuzz/) and runs it for a bounded time.
#   scripts/fuzz.sh [SECONDS]     (default 30)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_TO_RUN="${1:-30}"
DIR="$ROOT/build-fuzz"
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHRUN_FUZZ=ON \
  -DMESHRUN_BUILD_TRAINER=OFF -DMESHRUN_BUILD_TESTS=OFF >/dev/null
cmake --build "$DIR" --target request_decoder_fuzzer >/dev/null
mkdir -p "$DIR/corpus"
# Seed: a few valid requests, so the fuzzer starts from real framing.
printf '\x00\xce\xf7\x85\x3c' > "$DIR/corpus/validate"
printf '\x01\x02\0\0\0\0\0\0\0/k\x01\0\0\0\0\0\0\0v' > "$DIR/corpus/set"
printf '\x06\x01\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0/k' > "$DIR/corpus/wait"
"$DIR/bin/request_decoder_fuzzer" -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -print_final_stats=1 \
  "$DIR/corpus" 2>&1 | tail -n 12
