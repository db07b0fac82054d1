#!/usr/bin/env bash
# Elastic membership side by side: launch --nnodes 2:3 and torchrun --nnodes 2:3 (c10d) on the
# same network-namespace hosts (scripts/netns_hosts.sh), the same CPU train_resnet run (its
# torchrun contract under torchrun; per-rank batch 12 / WORLD_SIZE):
#   three nodes run; node C (its launcher or agent and its workers: the node is gone) is
#   SIGKILLed -> time until every worker of the 2-node world has started; then a node D starts
#   -> time until every worker of the 3-node world has started.
# The times come from the workers' own start stamps (date +%s.%N as each worker.sh begins), so
# both launchers are measured alike. Both get last_call_timeout=1; launch its default heartbeat
# (1 s, declared dead after 5 s) and checkpoint signal window (5 s), torchrun its defaults.
#
# Usage: scripts/bench_elastic.sh [BIN_DIR] [ours|torchrun|both]   (root; needs ip netns)
# torchrun: Debian's python3-torch (1.13) with a one-line fix for Python 3.11 (its Std.from_str
# gives None for "0"); PyTorch 2.x is used instead when TORCHRUN names its torchrun.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$(cd "${1:-$root/build/bin}" && pwd)"
which=${2:-both}
launch="$bin/launch"
train="$bin/train_resnet"
hosts="$root/scripts/netns_hosts.sh"
[[ $(id -u) == 0 ]] || { echo "SKIPPED: needs root (network namespaces)"; exit 77; }

dir=$(mktemp -d /tmp/bench-elastic-XXXXXX)
export NETNS_PREFIX="be$$x"
cleanup() {
  for i in 1 2 3 4; do ip netns pids "${NETNS_PREFIX}$i" 2>/dev/null | xargs -r kill -9; done
  "$hosts" down >/dev/null 2>&1
  if [[ ${BENCH_KEEP:-0} == 1 ]]; then echo "kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
"$hosts" reap be
"$hosts" up 4 >/dev/null || exit $?
master="$("$hosts" addr 1):29400"
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

# One run of the scenario with launcher $1; prints "loss S join S".
scenario() {
  local who=$1 run="$dir/$1" n i t_kill t_join
  mkdir -p "$run"
  cat >"$run/worker.sh" <<EOF
#!/bin/sh
echo "\$(date +%s.%N) \$WORLD_SIZE" >> "$run/start.\$RANK"
exec "$train" --depth 18 --width 8 --image-size 32 --num-samples 1200 --epochs 1000 --max-steps 4000 --seed 7 \\
  --threads 1 --log-every 1000 --comm-timeout 10 --batch-size \$((12 / WORLD_SIZE)) \\
  --save "$run/ck.safetensors" --save-every 20 --resume auto
EOF
  chmod +x "$run/worker.sh"
  node() {  # node NAME HOST
    local cmd
    if [[ $who == ours ]]; then
      cmd=("$launch" --nnodes 2:3 --rdzv-endpoint "$master" --max_restart 3 --checkpoint-signal USR2
           --rdzv-conf last_call_timeout=1 --devices cpu --nproc_per_node 1 --log_dir "$run/log.$1" "$run/worker.sh")
    else
      # is_host: torchrun matches the endpoint against gethostname()'s addresses, which inside a
      # network namespace are the machine's own: host 1 must be told it hosts the store.
      local conf=last_call_timeout=1
      [[ $2 == 1 ]] && conf+=,is_host=1
      cmd=("${torchrun[@]}" --nnodes 2:3 --rdzv_backend c10d --rdzv_endpoint "$master" --max_restarts 3
           --rdzv_conf "$conf" --nproc_per_node 1 --no_python "$run/worker.sh")
    fi
    ip netns exec "${NETNS_PREFIX}$2" "${cmd[@]}" >"$run/$1.out" 2>"$run/$1.err" &
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
  node a 1
  sleep 0.5  # host 1 binds the endpoint first in both launchers
  node b 2
  node c 3
  wait_started 3 3 0 120 >/dev/null || { echo "$who: round 0 never ran"; return 1; }
  for ((i = 0; i < 600; i++)); do [[ -e $run/ck.safetensors ]] && break; sleep 0.1; done
  t_kill=$(date +%s.%N)
  # The node is gone: every process of its namespace (its launcher or agent, and every worker
  # wherever their sessions are).
  ip netns pids "${NETNS_PREFIX}3" | xargs -r kill -9
  local back
  back=$(wait_started 2 2 "$t_kill" 120) || { echo "$who: never ran again at 2 nodes"; return 1; }
  sleep 2
  t_join=$(date +%s.%N)
  node d 4
  local grown
  grown=$(wait_started 3 3 "$t_join" 120) || { echo "$who: never ran at 3 nodes after the join"; return 1; }
  awk -v k="$t_kill" -v b="$back" -v j="$t_join" -v g="$grown" -v who="$who" \
    'BEGIN { printf "%-8s loss -> 2 nodes running: %6.2f s   join -> 3 nodes running: %6.2f s\n", who, b - k, g - j }'
  for i in 1 2 4; do ip netns pids "${NETNS_PREFIX}$i" | xargs -r kill -9; done
  wait 2>/dev/null
}

case $which in
  ours) scenario ours ;;
  torchrun) scenario torchrun ;;
  both) scenario ours; scenario torchrun ;;
  *) echo "usage: $0 [BIN_DIR] [ours|torchrun|both]" >&2; exit 2 ;;
esac
