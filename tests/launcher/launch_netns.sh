#!/usr/bin/env bash
# `launch` as a multi-node job across three "hosts": network namespaces joined by a bridge
# (scripts/netns_hosts.sh), 10.213.0.{1,2,3}, one launcher per host, --rank -1 (host 1 serves the
# store because its address is --master's; the others take ranks in arrival order).
#   1. a CPU train_resnet across the three hosts ends with the same parameters as three processes
#      on one machine;
#   2. the worker of rank 2 SIGKILLed: every host's launcher exits within 2 s, naming the root cause;
#   3. host 3 never arrives: hosts 1 and 2 time out, saying how many are missing and who arrived;
#   4. --max_restart 1 after a trainer is killed mid-run: the same parameters as without the kill;
#   5. torchrun's c10d form without ranks on two hosts (--rdzv-backend c10d --rdzv-endpoint).
# Usage: tests/launcher/launch_netns.sh PATH/TO/launch PATH/TO/train_resnet
# Needs root and `ip netns`; otherwise exits 77 (skipped) with the reason. Every wait is bounded.
set -uo pipefail
launch=${1:-}
train=${2:-}
[[ -x "$launch" && -x "$train" ]] || { echo "usage: $0 PATH/TO/launch PATH/TO/train_resnet" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
hosts="$root/scripts/netns_hosts.sh"

export NETNS_PREFIX="ll$$x"  # our own namespaces: concurrent runs do not collide
"$hosts" reap ll
"$hosts" up 3 >/dev/null
rc=$?
[[ $rc -eq 0 ]] || exit $rc
dir=$(mktemp -d /tmp/launch-netns-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  "$hosts" down
  rm -rf "$dir"
}
trap cleanup EXIT

LAUNCH_STORE_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export LAUNCH_STORE_TOKEN
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
master="$("$hosts" addr 1):29500"
on() { local i=$1; shift; ip netns exec "${NETNS_PREFIX}$i" timeout 120 "$@"; }
now() { date +%s.%N; }

# --- 1. training across three hosts == three processes on one machine
# --threads 1: one process per host would otherwise use every core, and a different reduction
# order gives different (equally right) parameters.
args=(--depth 18 --width 8 --image-size 32 --batch-size 4 --num-samples 96 --max-steps 6 --seed 7 --threads 1)
"$launch" --devices cpu --nproc_per_node 3 --log_dir "$dir/ref" "$train" "${args[@]}" >"$dir/ref.out" 2>&1
ref=$(grep -o 'params checksum fnv1a64=[0-9a-f]*' "$dir/ref.out")
pids=()
for i in 1 2 3; do
  on "$i" "$launch" --nnodes 3 --master "$master" --devices cpu --nproc_per_node 1 --log_dir "$dir/t$i" \
    "$train" "${args[@]}" >"$dir/t$i.out" 2>"$dir/t$i.err" &
  pids+=($!)
done
for i in 1 2 3; do
  wait "${pids[$((i - 1))]}"; rc=$?  # bounded: each runs under timeout 120
  [[ $rc == 0 ]] || fail "training: host $i exited with $rc: $(tail -3 "$dir/t$i.err")"
done
got=$(grep -o 'params checksum fnv1a64=[0-9a-f]*' "$dir/t1.out")
[[ -n "$ref" && "$got" == "$ref" ]] || fail "training: across hosts '$got', on one machine '$ref'"
grep -q "this is node 0 of 3" "$dir/t1.err" || fail "host 1 (the --master address) is not node 0"
[[ $failures == 0 ]] && echo "1. training across 3 hosts: $got (same as on one machine)"

# --- 2. a worker SIGKILLed on host 3 stops every host within 2 s. Its PID as this shell sees it,
# from /proc/self/stat: under `ip netns exec` no cgroup is mounted, so launch contains its
# workers in a PID namespace, where $$ counts from 2.
pids=()
for i in 1 2 3; do
  on "$i" "$launch" --nnodes 3 --master "$master" --devices cpu --nproc_per_node 1 --log_dir "$dir/k$i" \
    sh -c "read -r pid _ < /proc/self/stat; echo \$pid > $dir/kpid.\$RANK; exec sleep 60" >"$dir/k$i.out" 2>"$dir/k$i.err" &
  pids+=($!)
done
for _ in $(seq 1 1000); do [[ -s $dir/kpid.0 && -s $dir/kpid.1 && -s $dir/kpid.2 ]] && break; sleep 0.01; done
slowest=0
t0=$(now)
kill -9 "$(cat "$dir/kpid.2")"
for i in 1 2 3; do
  wait "${pids[$((i - 1))]}"; rc=$?  # bounded: each runs under timeout 120
  dt=$(awk -v a="$(now)" -v b="$t0" 'BEGIN { printf "%.3f", a - b }')
  [[ $rc != 0 ]] || fail "worker killed: host $i exited 0"
  awk -v d="$dt" 'BEGIN { exit !(d < 2.0) }' || fail "worker killed: host $i took ${dt} s (bound 2 s)"
  awk -v d="$dt" -v s="$slowest" 'BEGIN { exit !(d > s) }' && slowest=$dt
  grep -q "rank 2 killed by SIGKILL" "$dir/k$i.err" || fail "worker killed: host $i does not name the root cause"
done
[[ $failures == 0 ]] && echo "2. worker of rank 2 killed: every host out within 2 s (slowest: ${slowest} s), root cause named"

# --- 3. host 3 never arrives
pids=()
for i in 1 2; do
  on "$i" "$launch" --nnodes 3 --master "$master" --elastic_timeout 2 --devices cpu --nproc_per_node 1 \
    --log_dir "$dir/m$i" true >"$dir/m$i.out" 2>"$dir/m$i.err" &
  pids+=($!)
done
for i in 1 2; do
  wait "${pids[$((i - 1))]}"; rc=$?  # bounded: each runs under timeout 120
  [[ $rc == 1 ]] || fail "missing host: host $i exited with $rc"
  # Host 1 serves the store and lists who arrived; host 2 times out too, or finds that store
  # already closed by host 1's own timeout.
  want="rendezvous (timed out|failed: the store .* went away)"
  [[ $i == 1 ]] && want="1 of 3 nodes did not arrive; arrived: "
  grep -qE "$want" "$dir/m$i.err" || fail "missing host: host $i: $(tail -1 "$dir/m$i.err")"
done
[[ $failures == 0 ]] && echo "3. host 3 never arrived: hosts 1 and 2 timed out, naming the nodes that did"

# --- 4. --max_restart 1: rank 2's trainer SIGKILLed once a checkpoint exists; every host stops,
# meets again as generation 1, resumes (--resume auto) and ends with the uninterrupted parameters.
long=(--depth 18 --width 8 --image-size 32 --batch-size 4 --num-samples 96 --max-steps 40 --seed 7 --threads 1)
"$launch" --devices cpu --nproc_per_node 3 --log_dir "$dir/ref40" "$train" "${long[@]}" >"$dir/ref40.out" 2>&1
ref40=$(grep -o 'params checksum fnv1a64=[0-9a-f]*' "$dir/ref40.out")
cat >"$dir/worker.sh" <<WRAP
#!/bin/sh
if [ "\$PADDLE_RESTART_COUNT" = 0 ] && [ "\$RANK" = 2 ]; then
  "$train" "\$@" & pid=\$!
  i=0
  while [ ! -e "$dir/ck.train.safetensors" ] && [ \$i -lt 4000 ]; do sleep 0.005; i=\$((i + 1)); done
  kill -9 \$pid
  exit 137
fi
exec "$train" "\$@"
WRAP
chmod +x "$dir/worker.sh"
pids=()
for i in 1 2 3; do
  on "$i" "$launch" --nnodes 3 --master "$master" --max_restart 1 --devices cpu --nproc_per_node 1 \
    --log_dir "$dir/r$i" "$dir/worker.sh" "${long[@]}" --save "$dir/ck.safetensors" --save-every 4 --resume auto \
    >"$dir/r$i.out" 2>"$dir/r$i.err" &
  pids+=($!)
done
for i in 1 2 3; do
  wait "${pids[$((i - 1))]}"; rc=$?
  [[ $rc == 0 ]] || fail "restart: host $i exited with $rc: $(tail -3 "$dir/r$i.err")"
  grep -q "rendezvous: generation 1" "$dir/r$i.err" || fail "restart: host $i did not meet again as generation 1"
done
got=$(grep -o 'params checksum fnv1a64=[0-9a-f]*' "$dir/r1.out" | tail -1)
[[ -n "$ref40" && "$got" == "$ref40" ]] || fail "restart: restarted job '$got', uninterrupted '$ref40'"
[[ $failures == 0 ]] && echo "4. rank 2 killed mid-run, --max_restart 1: resumed to the uninterrupted parameters ($got)"

# --- 5. torchrun's c10d form, no rank, two hosts: the host of the endpoint serves the store
pids=()
for i in 1 2; do
  on "$i" "$launch" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "$master" --rdzv-id c10d-job --devices cpu \
    --nproc_per_node 2 --log_dir "$dir/c$i" sh -c "echo \$RANK/\$WORLD_SIZE > $dir/c.\$RANK; $launch kv barrier all --timeout 20" \
    >"$dir/c$i.out" 2>"$dir/c$i.err" &
  pids+=($!)
done
for i in 1 2; do
  wait "${pids[$((i - 1))]}"; rc=$?
  [[ $rc == 0 ]] || fail "c10d: host $i exited with $rc: $(tail -3 "$dir/c$i.err")"
done
grep -q "this is node 0 of 2" "$dir/c1.err" && grep -q "serving the job's store" "$dir/c1.err" ||
  fail "c10d: host 1 (the endpoint's) is not node 0 serving the store"
for r in 0 1 2 3; do [[ $(cat "$dir/c.$r" 2>/dev/null) == "$r/4" ]] || fail "c10d: rank $r saw '$(cat "$dir/c.$r" 2>/dev/null)'"; done
[[ $failures == 0 ]] && echo "5. torchrun's c10d form without ranks on 2 hosts: ranks 0-3 of 4, host 1 serves the store"

[[ $failures == 0 ]] || exit 1
echo "OK"
