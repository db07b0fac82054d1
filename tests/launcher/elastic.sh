#!/usr/bin/env bash
# Elastic membership, --nnodes 2:3, with a CPU train_resnet (--save, --resume auto):
#   three nodes start and run round 0; one node's launcher is SIGKILLed -> the other two re-form
#   at 2 nodes (round 1) and resume from the last checkpoint; a new node D starts -> the running
#   workers get the checkpoint signal (they save), stop, and the job re-forms at 3 nodes (round 2)
#   and runs to the end. Every node that is left exits 0.
#   store: launch's own store on --rdzv-endpoint; the node killed is C (the loss of the store's
#     node, A, would end the job, as torchrun's c10d).
#   etcd: --rdzv-backend etcd with a real etcd the test starts (Debian's etcd-server; $ETCD_BIN
#     names another; SKIPPED without one); the node killed is A, the first to join, which serves
#     the job's store: the survivors evict it, one of them serves a fresh store, and the job goes
#     on from the checkpoint.
# The per-rank batch is 12 / WORLD_SIZE, so that the global batch, and with it the checkpoint,
# fits every size (resuming at another global batch is the worker's business, not this test's).
# Prints the two figures from the launchers' logs: a node's loss -> workers running at the
# smaller size, a join -> workers running at the larger size.
#
# Usage: tests/launcher/elastic.sh PATH/TO/launch PATH/TO/train_resnet [loopback|netns] [store|etcd]
#   loopback: four launchers on 127.0.0.1; netns: four network-namespace hosts (and etcd on a
#   fifth) (scripts/netns_hosts.sh; needs root, else exits 77). Every wait is bounded.
#   ELASTIC_KEEP=1 keeps the logs and says where; ELASTIC_RDZV_CONF replaces the short
#   --rdzv-conf timings (last_call_timeout=1,keep_alive_interval=0.2,heartbeat_timeout=1,checkpoint_timeout=1).
set -uo pipefail
launch=${1:-}
train=${2:-}
where=${3:-loopback}
backend=${4:-store}
[[ -x "$launch" && -x "$train" && ( $where == loopback || $where == netns ) && ( $backend == store || $backend == etcd ) ]] ||
  { echo "usage: $0 PATH/TO/launch PATH/TO/train_resnet [loopback|netns] [store|etcd]" >&2; exit 2; }
etcd_bin=${ETCD_BIN:-$(command -v etcd || true)}
[[ $backend == store || -x $etcd_bin ]] || { echo "SKIPPED: no etcd binary (apt-get install etcd-server, or set ETCD_BIN)"; exit 77; }
launch=$(realpath "$launch")
train=$(realpath "$train")
root=$(cd "$(dirname "$0")/../.." && pwd)
hosts="$root/scripts/netns_hosts.sh"

dir=$(mktemp -d /tmp/launch-elastic-XXXXXX)
declare -A pid
etcd_pid=
cleanup() {
  for p in "${pid[@]}"; do kill -9 "$p" 2>/dev/null; done
  [[ -n $etcd_pid ]] && kill -9 "$etcd_pid" 2>/dev/null && wait "$etcd_pid" 2>/dev/null
  [[ $where == netns ]] && "$hosts" down >/dev/null 2>&1
  if [[ ${ELASTIC_KEEP:-0} == 1 ]]; then echo "kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
if [[ $where == netns ]]; then
  export NETNS_PREFIX="le$$x"
  "$hosts" reap le
  "$hosts" up 5 >/dev/null
  rc=$?
  [[ $rc -eq 0 ]] || exit $rc
  master="$("$hosts" addr 1):29400"
  etcd_host=$("$hosts" addr 5) etcd_port=2379 etcd_peer=2380
else
  master="127.0.0.1:$(free_port)"
  etcd_host=127.0.0.1 etcd_port=$(free_port) etcd_peer=$(free_port)
fi
# etcd, on a host of its own under netns: the launchers wait for it (up to --elastic_timeout).
if [[ $backend == etcd ]]; then
  etcd_cmd=("$etcd_bin" --name t --data-dir "$dir/etcd" --listen-client-urls "http://$etcd_host:$etcd_port"
            --advertise-client-urls "http://$etcd_host:$etcd_port" --listen-peer-urls "http://$etcd_host:$etcd_peer"
            --initial-advertise-peer-urls "http://$etcd_host:$etcd_peer" --initial-cluster "t=http://$etcd_host:$etcd_peer")
  if [[ $where == netns ]]; then
    ip netns exec "${NETNS_PREFIX}5" "${etcd_cmd[@]}" >"$dir/etcd.log" 2>&1 &
  else
    "${etcd_cmd[@]}" >"$dir/etcd.log" 2>&1 &
  fi
  etcd_pid=$!
  rdzv=(--rdzv-backend etcd --rdzv-endpoint "$etcd_host:$etcd_port")
else
  rdzv=(--rdzv-endpoint "$master")
fi

LAUNCH_STORE_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export LAUNCH_STORE_TOKEN
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

cat >"$dir/worker.sh" <<EOF
#!/bin/sh
exec "$train" --depth 18 --width 8 --image-size 32 --num-samples 1200 --epochs 1000 --max-steps 1500 --seed 7 \\
  --threads 1 --log-every 100 --comm-timeout 5 --batch-size \$((12 / WORLD_SIZE)) \\
  --save "$dir/ck.safetensors" --save-every 20 --resume auto
EOF
chmod +x "$dir/worker.sh"

# Node NAME on host I (netns) or on 127.0.0.1.
node() {
  local name=$1 i=$2 cmd
  cmd=("$launch" --nnodes 2:3 "${rdzv[@]}" --max_restart 3 --checkpoint-signal USR2 --grace 5
       --rdzv-conf "${ELASTIC_RDZV_CONF:-last_call_timeout=1,keep_alive_interval=0.2,heartbeat_timeout=1,checkpoint_timeout=1}"
       --elastic_timeout 60 --devices cpu --nproc_per_node 1 --log_dir "$dir/log.$name" "$dir/worker.sh")
  if [[ $where == netns ]]; then
    ip netns exec "${NETNS_PREFIX}$i" "${cmd[@]}" >"$dir/$name.out" 2>"$dir/$name.err" &
  else
    "${cmd[@]}" --host 127.0.0.1 >"$dir/$name.out" 2>"$dir/$name.err" &
  fi
  pid[$name]=$!
}
# Waits up to $2 s for grep -E $3 in file $1.
wait_for() {
  local file=$1 limit=$2 pattern=$3 i
  for ((i = 0; i < limit * 20; i++)); do
    grep -qE "$pattern" "$file" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "waited $limit s for '$pattern' in $(basename "$file"): $(tail -2 "$file" 2>/dev/null)"
  return 1
}
now() { date +%H:%M:%S.%N; }
# Seconds from clock time $1 (HH:MM:SS.frac) to the first launcher log line of $2 matching $3
# after the line matching $4.
since() {
  awk -v t0="$1" -v want="$3" -v after="$4" '
    function s(t,   a) { split(t, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
    $0 ~ after { armed = 1 }
    armed && $0 ~ want { printf "%.2f", s($4) - s(t0); exit }' "$2"
}

node a 1  # first: it serves the store (the first to bind, or to claim it in etcd); rank 0 runs on it
wait_for "$dir/a.err" 30 "serving the job's store"
node b 2
node c 3
for n in a b c; do wait_for "$dir/$n.err" 30 "round 0: this is node" || break; done
grep -q "round 0: this is node 0 of 3" "$dir/a.err" || fail "node A is not node 0: $(grep 'round 0' "$dir/a.err")"
for ((i = 0; i < 1200; i++)); do [[ -e $dir/ck.safetensors ]] && break; sleep 0.05; done
[[ -e $dir/ck.safetensors ]] || fail "no checkpoint after 60 s: $(tail -2 "$dir/a.err")"

# --- a node's launcher SIGKILLed: the two left re-form at 2 nodes. Our store: C; etcd: A, which
# serves the store
if [[ $backend == etcd ]]; then lost=a left=(b c); else lost=c left=(a b); fi
t_kill=$(now)
kill -9 "${pid[$lost]}"
wait "${pid[$lost]}" 2>/dev/null
unset "pid[$lost]"
# The new node 0 (etcd: whichever survivor serves the new store) runs rank 0.
zero=
for ((i = 0; i < 600; i++)); do
  for n in "${left[@]}"; do grep -q "round 1: this is node 0 of 2" "$dir/$n.err" 2>/dev/null && zero=$n; done
  [[ -n $zero ]] && break
  sleep 0.05
done
if [[ -z $zero ]]; then
  fail "no node 0 of round 1 within 30 s: $(tail -2 "$dir/${left[0]}.err")"
  zero=${left[0]}
fi
other=${left[0]}; [[ $other == "$zero" ]] && other=${left[1]}
wait_for "$dir/$other.err" 30 "round 1: this is node 1 of 2" && wait_for "$dir/$zero.out" 60 "2 rank\\(s\\) x batch 6"
grep -qE "round 0 failed \(node [0-9] .*launcher stopped responding" "$dir/$zero.err" ||
  fail "node $zero does not name the lost node: $(grep -m1 'round 0 failed' "$dir/$zero.err")"
if [[ $backend == etcd ]]; then
  grep -q "serving the job's store" "$dir/$zero.err" || fail "node $zero (node 0 of round 1) does not serve the store"
  old_store=$(grep -m1 -o 'store at [^ ;]*' "$dir/$other.err")
  new_store=$(grep -A1 'round 1: this is node' "$dir/$other.err" | grep -m1 -o 'store at [^ ;]*')
  [[ -n $new_store && $new_store != "$old_store" ]] || fail "round 1 did not get a fresh store ($old_store, then $new_store)"
  grep -q "Resuming from .* on 2 rank(s)" "$dir/$zero.out" || fail "round 1 did not resume from the checkpoint: $(grep -m1 -i resum "$dir/$zero.out")"
fi

# --- a new node: checkpoint signal, then 3 nodes
t_join=$(now)
node d 4
wait_for "$dir/d.err" 30 "waiting to join"
wait_for "$dir/$zero.err" 30 "round 2: this is node 0 of 3" && wait_for "$dir/d.err" 30 "round 2: this is node 2 of 3"
grep -q "the job re-forms (1 node(s) ask to join" "$dir/$zero.err" || fail "node $zero was not asked to re-form for the join"
wait_for "$dir/$zero.out" 30 "Saved .* \\(checkpoint signal\\)"

for n in "${left[@]}" d; do
  for ((i = 0; i < 1200; i++)); do kill -0 "${pid[$n]}" 2>/dev/null || break; sleep 0.1; done
  wait "${pid[$n]}"; rc=$?
  unset "pid[$n]"
  [[ $rc == 0 ]] || fail "node $n exited with $rc: $(tail -3 "$dir/$n.err")"
done
grep -q "3 rank(s) x batch 4" "$dir/$zero.out" || fail "round 2 did not train with 3 ranks"
loss=$(since "$t_kill" "$dir/$zero.err" "job default: 1 worker" "round 1: this is node")
join=$(since "$t_join" "$dir/$zero.err" "job default: 1 worker" "round 2: this is node")
grep -q "params checksum" "$dir/$zero.out" || fail "the job did not finish (no checksum): $(tail -2 "$dir/$zero.out")"

[[ $failures == 0 ]] || exit 1
echo "OK ($where, $backend): node $lost lost -> running at 2 nodes ${loss} s; join -> running at 3 nodes ${join} s" \
  "(--rdzv-conf ${ELASTIC_RDZV_CONF:-last_call_timeout=1,keep_alive_interval=0.2,heartbeat_timeout=1,checkpoint_timeout=1})"
