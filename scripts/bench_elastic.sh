#!/usr/bin/env bash
# Elastic membership side by side: launch --nnodes 2:3 over its own store and over etcd, and
# torchrun --nnodes 2:3 (c10d), on the same network-namespace hosts (scripts/netns_hosts.sh), the
# same CPU train_resnet run (its torchrun contract under torchrun; per-rank batch 12 / WORLD_SIZE):
#   three nodes run; as the first checkpoint appears, one node (its launcher or agent and its
#   workers: the node is gone) is SIGKILLed -> time until every worker of the 2-node world has
#   started; then a node D starts -> time until every worker of the 3-node world has started.
#   Steps lost at each change (from rank 0's --metrics-file of every round): the steps made before
#   it that the next round makes again (the last step logged, plus one, less the step it resumed
#   from). At the loss they are the steps since the checkpoint (a few: the kill follows it within
#   10 ms; the survivors make none without the lost node); at the join those since the last save.
#   ours, etcd, torchrun: the node killed is C; etcd-store: it is A, the node that serves the
#   job's store (over launch's own store, or torchrun's c10d, that loss ends the job).
# The times come from the workers' own start stamps (date +%s.%N as each worker.sh begins), so
# every launcher is measured alike. All get last_call_timeout=1; launch its default heartbeat
# (1 s, declared dead after 5 s; over etcd also each node's lease TTL) and checkpoint signal
# window (5 s), torchrun its defaults. etcd (Debian's etcd-server, or $ETCD_BIN) runs on a fifth
# host of its own, answering before node A starts; node A starts first and serves the store (it
# binds the endpoint, or claims the store in etcd) before B and C start. torchrun's agents run
# with a host name of their own each (bh1..bh4, resolved by /etc/netns/<namespace>/hosts, which
# `ip netns exec` puts in place of /etc/hosts): torchrun 1.13 gives its workers the store's
# agent's host name as MASTER_ADDR, which on one machine would be every namespace's own name.
#
# Usage: scripts/bench_elastic.sh [BIN_DIR] [ours|etcd|etcd-store|torchrun|both|all]   (root; ip netns)
#   both: ours and torchrun; all (the default): ours, etcd, etcd-store and torchrun.
# torchrun: Debian's python3-torch (1.13) with a one-line fix for Python 3.11 (its Std.from_str
# gives None for "0"); PyTorch 2.x is used instead when TORCHRUN names its torchrun.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$(cd "${1:-$root/build/bin}" && pwd)"
which=${2:-all}
launch="$bin/launch"
train="$bin/train_resnet"
hosts="$root/scripts/netns_hosts.sh"
[[ $(id -u) == 0 ]] || { echo "SKIPPED: needs root (network namespaces)"; exit 77; }

dir=$(mktemp -d /tmp/bench-elastic-XXXXXX)
export NETNS_PREFIX="be$$x"
cleanup() {
  for i in 1 2 3 4 5; do ip netns pids "${NETNS_PREFIX}$i" 2>/dev/null | xargs -r kill -9 2>/dev/null; done
  "$hosts" down >/dev/null 2>&1
  rm -rf /etc/netns/"${NETNS_PREFIX}"[1-5]; rmdir /etc/netns 2>/dev/null
  if [[ ${BENCH_KEEP:-0} == 1 ]]; then echo "kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
"$hosts" reap be
"$hosts" up 5 >/dev/null || exit $?
master="$("$hosts" addr 1):29400"
etcd_ep="$("$hosts" addr 5):2379"
etcd_bin=${ETCD_BIN:-$(command -v etcd || true)}
for i in 1 2 3 4; do
  mkdir -p "/etc/netns/${NETNS_PREFIX}$i"
  { echo "127.0.0.1 localhost"; for j in 1 2 3 4; do echo "$("$hosts" addr $j) bh$j"; done; } >"/etc/netns/${NETNS_PREFIX}$i/hosts"
done
export LAUNCH_STORE_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')

cat >"$dir/torchrun.py" <<'EOF'
import sys
import torch.distributed.elastic.multiprocessing as mp
import torch.distributed.elastic.multiprocessing.api as api
_to_map = api.to_map
api.to_map = mp.to_map = lambda v, n: _to_map(api.Std.NONE if v is None else v, n)
from torch.distributed.run import main
sys.exit(main())
EOF
torchrun=(${TORCHRUN:-/usr/bin/python3 "$dir/torchrun.py"})

# One run of the scenario with launcher $1; prints its row.
scenario() {
  local who=$1 run="$dir/$1" n i t_kill t_join lost=c host=3
  [[ $who == etcd-store ]] && lost=a host=1
  mkdir -p "$run"
  if [[ $who == etcd* ]]; then
    [[ -x $etcd_bin ]] || { echo "$who: SKIPPED (no etcd binary: apt-get install etcd-server, or set ETCD_BIN)"; return 0; }
    local e=${etcd_ep%:*}
    ip netns exec "${NETNS_PREFIX}5" "$etcd_bin" --name b --data-dir "$run/etcd" --listen-client-urls "http://$etcd_ep" \
      --advertise-client-urls "http://$etcd_ep" --listen-peer-urls "http://$e:2380" \
      --initial-advertise-peer-urls "http://$e:2380" --initial-cluster "b=http://$e:2380" >"$run/etcd.log" 2>&1 &
    disown
    for ((i = 0; i < 200; i++)); do
      /usr/bin/python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
        "http://$etcd_ep/version" 2>/dev/null && break
      sleep 0.1
    done
  fi
  # Rank 0 of each round writes every step it made to metrics.ROUND (JSON lines, "step" 0-based).
  cat >"$run/worker.sh" <<EOF
#!/bin/sh
echo "\$(date +%s.%N) \$WORLD_SIZE" >> "$run/start.\$RANK"
exec "$train" --depth 18 --width 8 --image-size 32 --num-samples 1200 --epochs 1000 --max-steps 4000 --seed 7 \\
  --threads 1 --log-every 1 --comm-timeout 10 --batch-size \$((12 / WORLD_SIZE)) \\
  --metrics-file "$run/metrics.\$TORCHELASTIC_RESTART_COUNT" --save "$run/ck.safetensors" --save-every 20 --resume auto
EOF
  chmod +x "$run/worker.sh"
  node() {  # node NAME HOST
    local cmd
    if [[ $who == ours ]]; then
      cmd=("$launch" --nnodes 2:3 --rdzv-endpoint "$master" --max_restart 3 --checkpoint-signal USR2
           --rdzv-conf last_call_timeout=1 --devices cpu --nproc_per_node 1 --log_dir "$run/log.$1" "$run/worker.sh")
    elif [[ $who == etcd* ]]; then
      cmd=("$launch" --nnodes 2:3 --rdzv-backend etcd --rdzv-endpoint "$etcd_ep" --max_restart 3 --checkpoint-signal USR2
           --rdzv-conf last_call_timeout=1 --devices cpu --nproc_per_node 1 --log_dir "$run/log.$1" "$run/worker.sh")
    else
      # is_host: torchrun matches the endpoint against gethostname()'s addresses, which inside a
      # network namespace are the machine's own: host 1 must be told it hosts the store.
      local conf=last_call_timeout=1
      [[ $2 == 1 ]] && conf+=,is_host=1
      cmd=(unshare --uts sh -c 'hostname "$0" && exec "$@"' "bh$2"
           "${torchrun[@]}" --nnodes 2:3 --rdzv_backend c10d --rdzv_endpoint "$master" --max_restarts 3
           --rdzv_conf "$conf" --nproc_per_node 1 --no_python "$run/worker.sh")
    fi
    ip netns exec "${NETNS_PREFIX}$2" "${cmd[@]}" >"$run/$1.out" 2>"$run/$1.err" &
    disown  # killed with its namespace: no job notice
  }
  # The time by which $1 workers of world size $2 have all (re)started after $3.
  started() {
    local t
    t=$(cat "$run"/start.* 2>/dev/null | awk -v w="$2" -v after="$3" '$2 == w && $1 > after { print $1 }' | sort -n |
        sed -n "${1}p")
    [[ -n $t ]] && echo "$t"
  }
  wait_started() {  # count world after limit_s
    local i
    for ((i = 0; i < $4 * 10; i++)); do started "$1" "$2" "$3" >/dev/null && { started "$1" "$2" "$3"; return 0; }; sleep 0.1; done
    return 1
  }
  # The steps lost at each change of the world so far, in order: rank 0's metrics of every round
  # (metrics.RESTART_COUNT; a resumed round's file starts with a resume record), oldest first.
  lost_steps() {
    local r
    for ((r = 0; r < 50; r++)); do [[ -e $run/metrics.$r ]] && cat "$run/metrics.$r"; done |
      awk '/"eval":true/ { next } { if (!match($0, /"step":[0-9]+/)) next; s = substr($0, RSTART + 7, RLENGTH - 7) + 0 }
           /"resume":true/ { printf "%d ", last + 1 - s; next } { last = s }'
  }
  node a 1
  if [[ $who == torchrun ]]; then
    sleep 0.5  # host 1 binds the endpoint first
  else
    for ((i = 0; i < 300; i++)); do grep -q "serving the job's store" "$run/a.err" 2>/dev/null && break; sleep 0.1; done
  fi
  node b 2
  node c 3
  wait_started 3 3 0 120 >/dev/null || { echo "$who: round 0 never ran"; return 1; }
  for ((i = 0; i < 6000; i++)); do [[ -e $run/ck.safetensors ]] && break; sleep 0.01; done
  t_kill=$(date +%s.%N)
  # The node is gone: every process of its namespace (its launcher or agent, and every worker
  # wherever their sessions are).
  ip netns pids "${NETNS_PREFIX}$host" | xargs -r kill -9 2>/dev/null
  local back grown at_loss at_join seen
  back=$(wait_started 2 2 "$t_kill" 120) || { echo "$who: never ran again at 2 nodes"; return 1; }
  for ((i = 0; i < 300; i++)); do [[ -n $(lost_steps) ]] && break; sleep 0.1; done
  sleep 2
  at_loss=$(lost_steps) seen=$(lost_steps | wc -w)
  t_join=$(date +%s.%N)
  node d 4
  grown=$(wait_started 3 3 "$t_join" 120) || { echo "$who: never ran at 3 nodes after the join"; return 1; }
  for ((i = 0; i < 300; i++)); do (( $(lost_steps | wc -w) > seen )) && break; sleep 0.1; done
  # No new resume record: the 3-node world's workers started but never trained.
  at_join=$(lost_steps | awk -v n="$seen" '{ print (NF > n) ? $NF " steps lost" : "never trained" }')
  # At the loss: the first change's figure (torchrun may re-form more than once before 2 nodes).
  awk -v k="$t_kill" -v b="$back" -v j="$t_join" -v g="$grown" -v who="$who" -v l="$lost" \
    -v sl="${at_loss%% *} steps lost" -v sj="$at_join" \
    'BEGIN { printf "%-10s node %s lost -> 2 nodes running: %6.2f s (%s)   join -> 3 nodes running: %6.2f s (%s)\n", who, l, b - k, sl, g - j, sj }'
  for i in 1 2 3 4 5; do ip netns pids "${NETNS_PREFIX}$i" 2>/dev/null | xargs -r kill -9 2>/dev/null; done
  wait 2>/dev/null
}

case $which in
  ours | etcd | etcd-store | torchrun) scenario "$which" ;;
  both) scenario ours; scenario torchrun ;;
  all) scenario ours; scenario etcd; scenario etcd-store; scenario torchrun ;;
  *) echo "usage: $0 [BIN_DIR] [ours|etcd|etcd-store|torchrun|both|all]" >&2; exit 2 ;;
esac
