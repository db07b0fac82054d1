#!/usr/bin/env bash
# Store benchmark on loopback: rendezvous time (connect + authenticate, SET own key, barrier,
# MULTI_GET all N keys) for N = 64, 1024, 4096 clients, median of 5 runs, twice: N threads each
# with its own proto::Client ("threads"), and N non-blocking connections driven by 2 threads
# ("mux", which measures the store rather than the scheduling of 4096 threads on 2 cores);
# then SET and GET requests per second from 64 client threads. Goal: 4096 clients in < 2 s.
#   scripts/bench_store.sh            (uses $BUILD_DIR, default build/, building store_bench)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
if [ ! -f "$build_dir/build.ninja" ] && [ ! -f "$build_dir/Makefile" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build_dir" -j2 --target store_bench >/dev/null
bench="$build_dir/bin/store_bench"
echo "# $(nproc) cores, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d" " -f1-3 /proc/loadavg)"
for n in 64 1024 4096; do
  "$bench" rendezvous "$n" 5
  "$bench" mux "$n" 5
done
"$bench" rate 64 2
