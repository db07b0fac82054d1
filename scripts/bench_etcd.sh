#!/usr/bin/env bash
# etcd client latencies on loopback (bench/etcd_bench.cpp): put, get, create-if-absent, a
# listing, a keep-alive, a watch's wake-up, a dead node's key deleted (TTL 2 s), a 3-node
# rendezvous. Starts its own etcd (Debian's etcd-server) on free ports; exits 77 without one.
#   scripts/bench_etcd.sh            (uses $BUILD_DIR, default build/, building etcd_bench)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
if [ ! -f "$build_dir/build.ninja" ] && [ ! -f "$build_dir/Makefile" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build_dir" -j2 --target etcd_bench >/dev/null
echo "# $(nproc) cores, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d" " -f1-3 /proc/loadavg)"
exec "$build_dir/bin/etcd_bench"
