#!/usr/bin/env bash
# Launch overhead: wall time from `launch` start until all N workers have exited, with /bin/true
# as the program, for N = 1, 8, 64 CPU processes; the median of RUNS runs (default 20).
# Where torchrun is installed, the same with `torchrun --no_python` (torch >= 2 spells it
# --no-python), and the ratio.
#   BENCH_RUNS=N      runs per point (default 20)
#   TORCHRUN_RUNS=N   runs per torchrun point (default BENCH_RUNS; torchrun takes seconds a run)
#   BENCH_SIZES="..." process counts (default "1 8 64")
#   LAUNCH=PATH       the launch binary (default build/bin/launch)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
launch="${LAUNCH:-$root/build/bin/launch}"
runs="${BENCH_RUNS:-20}"
sizes="${BENCH_SIZES:-1 8 64}"
[ -x "$launch" ] || { echo "bench_launch: $launch not found; run scripts/setup.sh first" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Median wall time in ms of "$@" over $runs runs; empty when a run fails.
median_ms() {
  local times=() t0 t1 i
  for ((i = 0; i < ${RUNS_NOW:-$runs}; i++)); do
    t0=$EPOCHREALTIME
    "$@" >/dev/null 2>"$tmp/err" || return 1
    t1=$EPOCHREALTIME
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) * 1000 }')")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m }'
}

torchrun_cmd=()
if command -v torchrun >/dev/null; then
  flag=--no-python
  torchrun --help 2>/dev/null | grep -q -- --no_python && flag=--no_python
  torchrun_cmd=(torchrun --standalone --nnodes 1 "$flag")
fi

echo "launch: $launch ($(nproc) CPU cores, median of $runs runs, torchrun ${TORCHRUN_RUNS:-$runs}, program /bin/true)"
printf '%-6s %14s %16s %8s\n' N "launch (ms)" "torchrun (ms)" ratio
for n in $sizes; do
  ours="$(median_ms "$launch" --devices cpu --nproc_per_node "$n" --log_dir "$tmp/log" --log_overwrite --stream none /bin/true)" \
    || { echo "bench_launch: launch failed for N=$n: $(tail -1 "$tmp/err")" >&2; exit 1; }
  theirs="-" ratio="-"
  if [ "${#torchrun_cmd[@]}" -gt 0 ]; then
    if theirs="$(RUNS_NOW="${TORCHRUN_RUNS:-$runs}" median_ms "${torchrun_cmd[@]}" --nproc_per_node "$n" /bin/true)"; then
      ratio="$(awk -v a="$theirs" -v b="$ours" 'BEGIN { printf "%.0fx", a / b }')"
    else
      echo "bench_launch: torchrun failed for N=$n: $(grep -v '^\s*$' "$tmp/err" | tail -1)" >&2
      theirs="failed"
    fi
  fi
  printf '%-6s %14s %16s %8s\n' "$n" "$ours" "$theirs" "$ratio"
done
[ "${#torchrun_cmd[@]}" -gt 0 ] || echo "torchrun is not installed: no comparison"
