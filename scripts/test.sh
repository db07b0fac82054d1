#!/usr/bin/env bash
# Installs everything the tests need, builds every target (`scripts/setup.sh test`: after
# scripts/run.sh only what it did not build) and runs every test (ctest). GPU tests ([gpu]) report
# as skipped where no GPU is visible; scripts/gpu_check.sh runs them on a GPU machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh" test
build_dir="${BUILD_DIR:-$root/build}"
cd "$build_dir"
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
