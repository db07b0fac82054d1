#!/usr/bin/env bash
# Two or three "hosts" on this machine for multi-node tests: one network namespace per host
# (lnch1, lnch2, ...), each with an eth0 on 10.213.0.<i>/24, all joined by a bridge that lives
# in a namespace of its own (lnch-hub). Nothing is added to the machine's own network
# namespace: no address, no route, no bridge.
#
#   scripts/netns_hosts.sh up N      create N hosts (1..9), replacing leftovers of an earlier run
#   scripts/netns_hosts.sh down      remove every namespace this script made
#   scripts/netns_hosts.sh check N   every host reaches every other (ping, or a TCP probe)
#   scripts/netns_hosts.sh addr I    print host I's address
#   scripts/netns_hosts.sh reap TAG  remove the namespaces of killed test runs: those named
#                                    TAG<pid>x... (a test's NETNS_PREFIX) whose pid is gone
#
# Run a program on host I:  ip netns exec lnchI PROGRAM ...
# Needs root and iproute2 with `ip netns`; otherwise it says so and exits 77 (CTest's SKIP).
# Env: NETNS_PREFIX (default lnch), NETNS_SUBNET (default 10.213.0).
set -euo pipefail

PREFIX=${NETNS_PREFIX:-lnch}
SUBNET=${NETNS_SUBNET:-10.213.0}
HUB="${PREFIX}-hub"

usage() {
  echo "usage: $0 up N | down | check N | addr I | reap TAG   (N: 1..9 hosts)" >&2
  exit 2
}

skip() {
  echo "SKIPPED: $* (network namespaces need root and iproute2)" >&2
  exit 77
}

host_ns() { echo "${PREFIX}$1"; }
host_addr() { echo "${SUBNET}.$1"; }

count_arg() {
  [[ "${1:-}" =~ ^[1-9]$ ]] || { echo "$0: host count '${1:-}' must be 1..9" >&2; exit 2; }
  echo "$1"
}

preflight() {
  [[ $(id -u) -eq 0 ]] || skip "not running as root"
  command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"
  ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"
  # Creating one is the only real test of the permission (containers often lack it).
  local probe="${PREFIX}-probe-$$"
  ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace here"
  ip netns del "$probe"
}

our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}([1-9]|-hub)$" || true
}

down() {
  local ns
  for ns in $(our_namespaces); do ip netns del "$ns"; done
}

up() {
  local n=$1 i ns
  down
  ip netns add "$HUB"
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" link set br0 up
  ip -n "$HUB" link set lo up
  for ((i = 1; i <= n; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    # Both ends are made inside namespaces: the machine's own namespace never sees them.
    ip -n "$HUB" link add "v$i" type veth peer name eth0 netns "$ns"
    ip -n "$HUB" link set "v$i" master br0 up
    ip -n "$ns" addr add "$(host_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    echo "host $i: namespace $ns, address $(host_addr "$i")"
  done
}

# One TCP connection from host $1 to host $2, for machines without ping. Bounded: 5 s.
tcp_probe() {
  local from=$1 to=$2 port line
  exec {fd}< <(ip netns exec "$(host_ns "$to")" timeout 5 /usr/bin/python3 -c '
import socket, sys
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1); s.settimeout(4)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.sendall(b"ok\n")' "$(host_addr "$to")")
  read -r -t 5 -u "$fd" port || { echo "host $to: TCP probe listener did not start" >&2; return 1; }
  line=$(ip netns exec "$(host_ns "$from")" timeout 3 bash -c \
    "exec 3<>/dev/tcp/$(host_addr "$to")/$port && head -n1 <&3") || true
  exec {fd}<&-
  [[ "$line" == ok ]]
}

check() {
  local n=$1 i j how
  for ((i = 1; i <= n; i++)); do
    for ((j = 1; j <= n; j++)); do
      ((i == j)) && continue
      if command -v ping >/dev/null; then
        how=ping
        ip netns exec "$(host_ns "$i")" ping -c1 -W1 "$(host_addr "$j")" >/dev/null || {
          echo "host $i cannot reach host $j ($(host_addr "$j")) by ping" >&2; return 1; }
      else
        how="TCP probe (no ping installed)"
        tcp_probe "$i" "$j" || { echo "host $i cannot reach host $j ($(host_addr "$j")) over TCP" >&2; return 1; }
      fi
    done
  done
  echo "all $n hosts reach each other ($how)"
}

# Tests use NETNS_PREFIX=TAG<their pid>x so that concurrent runs never collide; a run that was
# killed leaves its namespaces behind, and the next run of that test removes them.
reap() {
  local tag=$1 ns p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${tag}[0-9]+x([1-9]|-hub)\$"); do
    p=${ns#"$tag"}
    p=${p%%x*}
    kill -0 "$p" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
  done
}

case "${1:-}" in
  reap) [[ "${2:-}" =~ ^[a-z]+$ ]] || usage; [[ $(id -u) -eq 0 ]] || skip "not running as root"; reap "$2" ;;
  up) n=$(count_arg "${2:-}"); preflight; up "$n" ;;
  down) [[ $(id -u) -eq 0 ]] || skip "not running as root"; down ;;
  check) n=$(count_arg "${2:-}"); preflight; check "$n" ;;
  addr) [[ "${2:-}" =~ ^[1-9]$ ]] || usage; host_addr "$2" ;;
  *) usage ;;
esac
