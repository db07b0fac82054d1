#!/usr/bin/env bash
# Builds the store's libFuzzer harness (frame decoder + state machine) with clang-14,
# AddressSanitizer and UBSan, and runs it for a bounded time.
#   scripts/fuzz_store.sh [SECONDS]   (default 30; CI runs 30, a longer run: 3600)
# Build folder: $FUZZ_BUILD_DIR (default build-fuzz/); crashes land there as crash-*.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-30}"
out="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
cxx="${CLANGXX:-clang++-14}"
command -v "$cxx" >/dev/null || { echo "fuzz_store.sh: $cxx not found; install clang-14 and libfuzzer-14-dev" >&2; exit 2; }
mkdir -p "$out/corpus"
"$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root" "$root/tests/proto/fuzz/fuzz_store.cpp" "$root/proto/codec.cpp" \
  "$root/proto/kv_state.cpp" "$root/proto/token.cpp" -lcrypto -o "$out/fuzz_store"  # token.cpp: OpenSSL's HMAC
# Seed corpus: valid frames of every op (written by the harness's own codec via a tiny generator).
cp -n "$root"/tests/proto/fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
cd "$out"
exec ./fuzz_store -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -print_final_stats=1 corpus
