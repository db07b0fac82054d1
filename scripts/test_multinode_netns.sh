#!/usr/bin/env bash
# The multi-node library across real network namespaces (scripts/netns_hosts.sh): three
# "hosts" 10.213.0.{1,2,3}, one multinode_node per host (tests/launcher/multinode).
#   1. rendezvous: all three agree on the layout; a worker failure on host 3 reaches the
#      other two within 2 s, naming node, rank and exit code;
#   2. host 3's launcher is SIGKILLed: the others report it within 10 s (default heartbeat
#      timeout, 5 s);
#   3. host 3 never arrives: the timeout names node rank 2 on the two hosts that did.
# Usage: scripts/test_multinode_netns.sh PATH/TO/multinode_node
# Needs root; otherwise exits 77 (skipped) with the reason. Every wait is bounded (read -t).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
node_bin=${1:-}
[[ -x "$node_bin" ]] || { echo "usage: $0 PATH/TO/multinode_node" >&2; exit 2; }

export NETNS_PREFIX="lt$$x"   # our own namespaces: concurrent runs do not collide
hosts="$here/netns_hosts.sh"
"$hosts" reap lt
"$hosts" up 3 >/dev/null
rc=$?
[[ $rc -eq 0 ]] || exit $rc
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  "$hosts" down
}
trap cleanup EXIT

LAUNCH_STORE_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export LAUNCH_STORE_TOKEN
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
addr() { "$hosts" addr "$1"; }

# start I ARGS...: runs multinode_node on host I; its output on fd out[I], its pid in pid[I].
declare -A out pid
start() {
  local i=$1 fd
  shift
  exec {fd}< <(exec ip netns exec "${NETNS_PREFIX}$i" "$node_bin" --host "$(addr "$i")" "$@" 2>&1)
  out[$i]=$fd
  pid[$i]=$!
  pids+=("$!")
}

# expect I PATTERN SECONDS: reads host I's lines until one matches; prints it. Bounded.
expect() {
  local i=$1 pattern=$2 t=$3 line deadline=$((SECONDS + $3))
  while ((SECONDS <= deadline)); do
    IFS= read -r -t "$t" -u "${out[$i]}" line || break
    echo "  host $i: $line" >&2
    if [[ "$line" == *"$pattern"* ]]; then
      echo "$line"
      return 0
    fi
  done
  fail "host $i: no line with '$pattern' within $t s"
  return 1
}

stop_all() {
  local i
  for i in "${!out[@]}"; do
    kill -9 "${pid[$i]}" 2>/dev/null
    exec {out[$i]}<&-
  done
  out=()
  pid=()
}

at_ms() { sed -n 's/.* at=\([0-9]*\) .*/\1/p' <<<"$1"; }

# --- 1. rendezvous and a worker failure ---
echo "== rendezvous of 3 hosts, then rank 5 on host 3 exits with code 3"
start 1 --serve "$(addr 1)" --nnodes 3 --rank 0 --nproc 2 --watch-ms 8000
store=$(expect 1 "store " 10) && store=${store#store }
start 2 --master "$store" --nnodes 3 --nproc 2 --watch-ms 8000
start 3 --master "$store" --nnodes 3 --nproc 2 --watch-ms 8000 --fail 5:3
declare -A layout
for i in 1 2 3; do layout[$i]=$(expect "$i" "layout " 15); done
want_eps="$(addr 1):6170,$(addr 1):6171"
for i in 1 2 3; do
  [[ "${layout[$i]}" == *"world=6 nnodes=3"* && "${layout[$i]}" == *"endpoints=$want_eps"* ]] ||
    fail "host $i layout: ${layout[$i]}"
done
[[ "${layout[1]}" == *"node_rank=0 rank_offset=0"* ]] || fail "host 1 is not node 0: ${layout[1]}"
reported=$(expect 3 "reported " 10)
for i in 1 2; do
  got=$(expect "$i" "failure " 5) || continue
  [[ "$got" == *"node "?" ($(addr 3)): rank 5 exited with code 3"* ]] || fail "host $i root cause: $got"
  dt=$(($(at_ms "$got") - $(at_ms "$reported")))
  echo "  host $i saw the failure $dt ms after host 3 reported it" >&2
  ((dt < 2000)) || fail "host $i took $dt ms (limit 2000)"
done
stop_all

# --- 2. a launcher that dies ---
echo "== host 3's launcher is SIGKILLed"
start 1 --serve "$(addr 1)" --nnodes 3 --rank 0 --watch-ms 15000
store=$(expect 1 "store " 10) && store=${store#store }
start 2 --master "$store" --nnodes 3 --rank 1 --watch-ms 15000
start 3 --master "$store" --nnodes 3 --rank 2 --watch-ms 15000
for i in 1 2 3; do expect "$i" "layout " 15 >/dev/null; done
kill -9 "${pid[3]}"
killed=$(date +%s%3N)
for i in 1 2; do
  got=$(expect "$i" "failure " 10) || continue
  [[ "$got" == *"node 2 ($(addr 3)): launcher stopped responding"* ]] || fail "host $i root cause: $got"
  dt=$(($(at_ms "$got") - killed))
  echo "  host $i reported the dead launcher $dt ms after the kill (default heartbeat timeout)" >&2
  ((dt < 10000)) || fail "host $i took $dt ms (limit 10000)"
done
stop_all

# --- 3. a node that never arrives ---
echo "== host 3 never arrives (timeout 2 s)"
start 1 --serve "$(addr 1)" --nnodes 3 --rank 0 --timeout-ms 2000
store=$(expect 1 "store " 10) && store=${store#store }
# Host 2 gives up first: once host 1 gives up, its store (and what arrived) is gone.
start 2 --master "$store" --nnodes 3 --rank 1 --timeout-ms 1500
for i in 1 2; do
  got=$(expect "$i" "error " 10) || continue
  [[ "$got" == *"1 of 3 nodes did not arrive (missing node rank 2)"* ]] || fail "host $i: $got"
done
stop_all

if ((failures)); then
  echo "multi-node netns test: $failures failure(s)"
  exit 1
fi
echo "multi-node netns test: all passed"
