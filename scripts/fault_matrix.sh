#!/usr/bin/env bash
# The fault matrix of issue 14, run against the built binaries: signals, kill -9 of the launcher,
# a stalled console, hostile store clients, a full disk, a stopped rank, a killed peer, a killed
# node, a late checkpoint signal, a missing peer, a failing --summary, Slurm's elastic timeout,
# Slurm's repeated SIGTERM (time limit, scancel); and issue 22's: node 0 killed, a worker in D
# state, a crash loop, two launches on one log folder, a store flood, a planted port-lock folder,
# a restart's report, 100,000 arguments, a guessable token; strangers on a train_resnet rank's ring
# port, a FIFO and sparse giants in a list file, a corrupt or NaN checkpoint, a store that never
# answers, ranks with other options, --resume naming a folder; and rdzv's (issues 21, 22 item 11):
# IPv6, the c10d form on one host, elastic membership losing and gaining a node, and over etcd the
# store's node lost, an etcd nobody answers, another job id, a wrong token. Prints one table
# row per case: PASS/FAIL (SKIP where the machine cannot run it, e.g. FUSE without root) and its
# figure (time to teardown, peak RSS, exit code).
#
#   scripts/fault_matrix.sh [BIN_DIR]        (default: build/bin; needs launch and train_resnet,
#                                             and fuse_hold for the D-state case)
#
# Everything runs on 127.0.0.1 in a temporary directory, every wait is bounded, and what a case
# started is killed at its end. The full-disk case mounts a 64 KiB tmpfs when it may (root;
# FAULT_MATRIX_NO_MOUNT=1 to skip), else writes the console to /dev/full, which fails every
# write with ENOSPC the same way. Exit status: the number of failed cases (0: all passed).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$(cd "${1:-$root/build/bin}" && pwd)"
launch="$bin/launch"
train="$bin/train_resnet"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
for b in "$launch" "$train"; do
  [ -x "$b" ] || { echo "fault_matrix.sh: $b not found; build first (scripts/setup.sh) or give BIN_DIR" >&2; exit 2; }
done

work="$(mktemp -d /tmp/fault-matrix.XXXXXX)"
tag="0.$$"           # our grandchildren are `sleep 1000 $tag`: found by their exact command line
mounted=""
cleanup() {
  pkill -KILL -f "^sleep 1000 $tag\$" 2>/dev/null
  for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
  [ -n "$mounted" ] && umount "$mounted" 2>/dev/null
  [ -n "${FAULT_MATRIX_KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
TA=(--device cpu --depth 18 --width 8 --image-size 32 --num-classes 10 --data learnable --batch-size 8)
failed=0

now_ms() { date +%s%3N; }
alive() { pgrep -f "^sleep 1000 $tag\$" | wc -l; }
row() {
  printf '| %-46s | %-4s | %s |\n' "$1" "$2" "$3"
  [ "$2" = PASS ] || [ "$2" = SKIP ] || failed=$((failed + 1))
}
# wait_for COND SECONDS: polls a shell condition every 10 ms, bounded.
wait_for() {
  local end=$(( $(now_ms) + $2 * 1000 ))
  until eval "$1"; do
    [ "$(now_ms)" -ge "$end" ] && return 1
    sleep 0.01
  done
}
# wait_exit PID SECONDS: sets rc to its exit code, or 255 (after SIGKILL) when it did not end in
# time. Not in a subshell: only this shell can wait for its jobs.
wait_exit() {
  local end=$(( $(now_ms) + $2 * 1000 ))
  while kill -0 "$1" 2>/dev/null; do
    if [ "$(now_ms)" -ge "$end" ]; then kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null; rc=255; return; fi
    sleep 0.005
  done
  wait "$1"; rc=$?
}
# The launcher's worker of rank R (host PID, through the launcher's children and their RANK).
worker_pid() {
  local k
  for k in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    # (2> before <: a child that has just gone must not print an error)
    if tr '\0' '\n' 2>/dev/null < /proc/"$k"/environ | grep -qx "RANK=$2"; then echo "$k"; return; fi
  done
}
fresh() { rm -rf "$work/c"; mkdir -p "$work/c"; cd "$work/c" || exit 2; }

printf '| %-46s | %-4s | %s |\n' "case" "" "figure"
printf '|%s|%s|%s|\n' "------------------------------------------------" "------" "------------------------------------------"

# --- signals x4: workers with wrapped and setsid grandchildren; teardown within 100 ms
family="sh -c 'sleep 1000 $tag & sleep 1000 $tag & wait' & setsid sleep 1000 $tag & touch ready.\$RANK; wait"
for sig in INT TERM HUP QUIT; do
  fresh
  "$launch" --devices cpu --nproc_per_node 2 --grace 10 sh -c "$family" >out 2>err &
  pid=$!
  wait_for '[ -e ready.0 ] && [ -e ready.1 ] && [ "$(alive)" -eq 6 ]' 20
  t0=$(now_ms); kill -"$sig" "$pid"; wait_exit "$pid" 30; ms=$(( $(now_ms) - t0 ))
  want=$((128 + $(kill -l "$sig")))
  left=$(alive)
  result=FAIL; [ "$rc" = "$want" ] && [ "$left" = 0 ] && [ "$ms" -le 100 ] && result=PASS
  row "SIG$sig, wrapped + setsid grandchildren" "$result" "teardown $ms ms, exit $rc (want $want), $left left"
done
containment="$(grep -o 'containment: [^(;]*' err | head -1)"

# --- Slurm's signals (issue 22): at a time limit SIGTERM, SIGCONT, SIGTERM reach launch within
# milliseconds; under scancel every worker gets them too, besides launch's forward. Either way one
# request: both ranks of train_resnet save and stop within the grace, launch exits 143.
for form in "time limit" scancel; do
  fresh
  "$launch" --devices cpu --nproc_per_node 2 --grace 10 "$train" "${TA[@]}" --epochs 100000 --log-every 1 \
    --save "$PWD/ck.safetensors" >out 2>err &
  pid=$!
  wait_for 'grep -q "Batch\[3\]" out 2>/dev/null' 60
  targets="$pid"
  [ "$form" = scancel ] && targets="$pid $(worker_pid "$pid" 0) $(worker_pid "$pid" 1)"
  t0=$(now_ms)
  kill -TERM $targets
  wait_for 'grep -q "received SIGTERM" err' 5
  kill -CONT $targets; kill -TERM $targets
  wait_exit "$pid" 30; ms=$(( $(now_ms) - t0 ))
  step="$(sed -n 's/.*Stopped by signal 15 at step \([0-9]*\): saved.*/\1/p' out log/workerlog.0 2>/dev/null | head -1)"
  result=FAIL
  [ "$rc" = 143 ] && [ -n "$step" ] && [ -s ck.safetensors ] && ! grep -q "killed by\|killing every worker now" err out &&
    result=PASS
  row "SIGTERM, SIGCONT, SIGTERM ($form), train_resnet" "$result" \
      "exit $rc after $ms ms, saved step ${step:-none}, grace kept"
done

# --- kill -9 of the launcher: nothing alive 1 s later
for kind in wrapped setsid; do
  fresh
  if [ "$kind" = wrapped ]; then
    script="sh -c 'sleep 1000 $tag & sleep 1000 $tag & wait' & touch ready.\$RANK; wait"; n=4
  else
    script="setsid sleep 1000 $tag & setsid sleep 1000 $tag & touch ready.\$RANK; wait"; n=4
  fi
  "$launch" --devices cpu --nproc_per_node 2 sh -c "$script" >out 2>err &
  pid=$!
  wait_for '[ -e ready.0 ] && [ -e ready.1 ] && [ "$(alive)" -eq '"$n"' ]' 20
  t0=$(now_ms); kill -KILL "$pid"; wait "$pid" 2>/dev/null
  if wait_for '[ "$(alive)" -eq 0 ]' 3; then ms=$(( $(now_ms) - t0 )); else ms=-1; fi
  result=FAIL; [ "$ms" -ge 0 ] && [ "$ms" -le 1000 ] && result=PASS
  row "kill -9 launch, $kind grandchildren" "$result" \
      "$([ "$ms" -ge 0 ] && echo "all gone after $ms ms" || echo "$(alive) still alive after 3 s")"
  pkill -KILL -f "^sleep 1000 $tag\$" 2>/dev/null
done

# --- a stalled console: rank 1 exits 5 while rank 0 floods a stdout nobody reads; then the same
# with 2>&1, where the launcher's own messages meet the stalled pipe too (the root cause is read
# from --summary: nobody can read the console). stalled_console [merged]: sets rc, ms, lines.
stalled_console() {
  fresh
  mkfifo console
  exec 3<>console  # held open, never read: the launcher's writes fill it and stop
  (if [ "${1:-}" = merged ]; then exec 2>&1; else exec 2>err; fi
   exec "$launch" --devices cpu --nproc_per_node 2 --grace 2 --summary summary.json sh -c \
     'if [ $RANK = 1 ]; then while [ ! -e flooded ]; do sleep 0.01; done; date +%s%3N > failed; exit 5; fi
      seq 1 1000000; touch flooded; sleep 60') >console &
  local pid=$!
  wait_exit "$pid" 60; local t1; t1=$(now_ms)
  exec 3>&-
  ms=$(( t1 - $(cat failed 2>/dev/null || echo "$t1") ))
  lines=$(wc -l < log/workerlog.0)
}
stalled_console
result=FAIL
[ "$rc" = 5 ] && grep -q 'root cause: rank 1 exited with code 5' err && [ "$lines" = 1000000 ] && [ "$ms" -le 2000 ] && result=PASS
row "stalled console (nobody reads stdout)" "$result" "failure -> exit $ms ms, exit $rc, rank 0's log $lines/1000000 lines"
stalled_console merged
result=FAIL
[ "$rc" = 5 ] && grep -q '"description": *"rank 1 exited with code 5"' summary.json && [ "$lines" = 1000000 ] &&
  [ "$ms" -le 2000 ] && result=PASS
row "stalled console, 2>&1 (nobody reads either)" "$result" "failure -> exit $ms ms, exit $rc, rank 0's log $lines/1000000 lines"

# --- hostile store clients: 1,000 at once, before any HELLO
fresh
"$launch" --devices cpu --nproc_per_node 1 sh -c \
  'echo $LAUNCH_STORE_ADDR > addr; while [ ! -e go ]; do sleep 0.02; done; '"$launch"' kv set k v && '"$launch"' kv get k' \
  >out 2>err &
pid=$!
wait_for '[ -s addr ]' 20
peak=$("$py" - "$(cut -d: -f2 addr)" "$pid" <<'EOF'
import resource, socket, struct, sys, time
port, pid = int(sys.argv[1]), sys.argv[2]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
def hdr(op, n): return b"LSTR\x02" + bytes([op]) + b"\0\0" + struct.pack("<Q", n)
socks = []
for i in range(1000):
    s = socket.create_connection(("127.0.0.1", port)); s.settimeout(0.2); socks.append(s)
    try:
        k = i % 10
        if k < 5: s.sendall(hdr(1, 134221836) + bytes(256 << 10))  # the issue's client
        elif k == 5: s.sendall(hdr(1, 2**64 - 1) + bytes(4096))
        elif k < 9: s.sendall(hdr(1, 12300) + b"x" * 12299)      # largest HELLO, unfinished
        elif i % 20 == 9: s.sendall(b"GET / HTTP/1.1\r\n\r\n")
    except OSError:
        pass
time.sleep(0.5)
hwm = [l for l in open("/proc/%s/status" % pid) if l.startswith("VmHWM")][0].split()[1]
print(int(hwm) // 1024)
EOF
)
touch go
wait_exit "$pid" 20
warns=$(grep -c 'LAUNCH W.*store:' err)
result=FAIL; [ -n "$peak" ] && [ "$peak" -lt 64 ] && [ "$rc" = 0 ] && [ "$warns" -lt 40 ] && result=PASS
row "1,000 hostile store clients" "$result" "launcher peak RSS ${peak:-?} MB, job exit $rc, $warns WARN lines"

# --- a full disk: the console file hits ENOSPC
fresh
console=/dev/full; where="/dev/full"
if [ -z "${FAULT_MATRIX_NO_MOUNT:-}" ] && [ "$(id -u)" = 0 ] && mkdir -p "$work/tmpfs" &&
   mount -t tmpfs -o size=64k tmpfs "$work/tmpfs" 2>/dev/null; then
  mounted="$work/tmpfs"; console="$mounted/console.txt"; where="64 KiB tmpfs"
fi
"$launch" --devices cpu --nproc_per_node 1 sh -c 'seq 1 100000' >"$console" 2>err &
wait_exit $! 20
said=$(grep -c 'cannot write stdout: No space left on device' err)
lines=$(wc -l < log/workerlog.0)
result=FAIL; [ "$rc" = 0 ] && [ "$said" = 1 ] && [ "$lines" = 100000 ] && result=PASS
row "full disk: console file ($where)" "$result" "exit $rc, ENOSPC said $said time(s), log $lines/100000 lines"
[ -n "$mounted" ] && umount "$mounted" && mounted=""

# --- a stopped rank, a killed peer: signal one rank of a train_resnet ring once it trains
# signal_rank NPROC RANK SIG: sets rc and ms (signal -> launch's exit).
signal_rank() {
  fresh
  "$launch" --devices cpu --nproc_per_node "$1" --grace 5 "$train" "${TA[@]}" --num-samples 100000 --epochs 1 \
    --log-every 1 --comm-timeout 3 >out 2>err &
  local pid=$!
  wait_for 'grep -q "Batch\[2\]" log/workerlog.0 2>/dev/null' 60
  local victim; victim=$(worker_pid "$pid" "$2")
  local t0; t0=$(now_ms); kill -"$3" "$victim"; wait_exit "$pid" 30; ms=$(( $(now_ms) - t0 ))
}
signal_rank 2 1 STOP
result=FAIL; [ "$rc" = 86 ] && grep -q 'root cause: rank 1 stopped responding' err && result=PASS
row "SIGSTOP of one train_resnet rank" "$result" "root cause rank 1 after $ms ms (--comm-timeout 3), exit $rc"
signal_rank 4 2 STOP
result=FAIL; [ "$rc" = 86 ] && grep -q 'root cause: rank 2 stopped responding' err && result=PASS
row "SIGSTOP of rank 2 of 4 (a ring of noticers)" "$result" "root cause rank 2 after $ms ms (--comm-timeout 3), exit $rc"
signal_rank 2 1 KILL
result=FAIL; [ "$rc" = 137 ] && grep -q 'root cause: rank 1 killed by SIGKILL' err && result=PASS
row "SIGKILL of one train_resnet rank" "$result" "root cause rank 1 after $ms ms, exit $rc"
signal_rank 4 2 KILL
result=FAIL; [ "$rc" = 137 ] && grep -q 'root cause: rank 2 killed by SIGKILL' err && result=PASS
row "SIGKILL of rank 2 of 4" "$result" "root cause rank 2 after $ms ms, exit $rc"

# --- one node's launcher killed: two launchers on loopback (one address), train_resnet across
# them. kill_node VICTIM: once they train, SIGKILL node VICTIM's launcher; sets rc and ms (kill ->
# the other node's exit), the other node's stderr in err.OTHER.
kill_node() {
  local victim=$1 other=$((1 - $1)) n
  fresh
  local master="127.0.0.1:$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  local pids=()
  for n in 0 1; do
    LAUNCH_STORE_TOKEN=0123456789abcdef0123456789abcdef-fault-matrix \
      "$launch" --nnodes 2 --master "$master" --rank $n --host 127.0.0.1 --devices cpu --nproc_per_node 1 \
      --log_dir log "$train" "${TA[@]}" --num-samples 100000 --epochs 1 --log-every 1 >out.$n 2>err.$n &
    pids+=($!)
  done
  wait_for 'grep -q "Batch\[2\]" log/workerlog.'"$other"' 2>/dev/null' 60
  local t0; t0=$(now_ms); kill -KILL "${pids[$victim]}"; wait "${pids[$victim]}" 2>/dev/null
  wait_exit "${pids[$other]}" 30; ms=$(( $(now_ms) - t0 ))
}
kill_node 1
result=FAIL
grep -q 'root cause, on another node: node 1' err.0 && ! grep -q 'root cause: rank 0' err.0 && [ "$rc" != 0 ] &&
  [ "$ms" -le 2000 ] && result=PASS
row "one node's launcher killed (2 nodes, ring)" "$result" "node 0 names node 1 after $ms ms, exit $rc"
# issue 22, item 4: node 0, the store's host, killed; node 1 shares its address
kill_node 0
result=FAIL
grep -q 'root cause, on another node: node 0 (127.0.0.1): launcher stopped responding' err.1 &&
  ! grep -q 'node 1 (127.0.0.1): launcher stopped' err.1 && [ "$rc" != 0 ] && [ "$ms" -le 2000 ] && result=PASS
row "node 0 (the store's host) killed, one address" "$result" "node 1 names node 0 after $ms ms, exit $rc"

# --- a late checkpoint signal: it reaches a wrapper shell and a program without its handler
fresh
"$launch" --devices cpu --nproc_per_node 2 --checkpoint-signal USR2 sh -c \
  "sh -c 'sleep 1.5'; touch done.\$RANK" >out 2>err &
pid=$!
wait_for '[ -n "$(worker_pid '"$pid"' 1)" ]' 20
kill -USR2 "$pid"  # forwarded to each worker: the wrapper shells
sleep 0.2
kill -USR2 -- -"$(worker_pid "$pid" 0)" 2>/dev/null  # rank 0's whole group, as Slurm signals a step
wait_exit "$pid" 20
result=FAIL; [ "$rc" = 0 ] && [ -e done.0 ] && [ -e done.1 ] && result=PASS
row "checkpoint signal before any handler" "$result" "exit $rc$(grep -q 'killed by SIGUSR2' err && echo ', a rank killed by SIGUSR2')"

# --- a missing peer: rank 1 stops before it joins the ring
fresh
"$launch" --devices cpu --nproc_per_node 2 --grace 5 sh -c \
  '[ $RANK = 1 ] && kill -STOP $$; exec '"$train ${TA[*]}"' --num-samples 64 --epochs 1 --comm-timeout 3' >out 2>err &
pid=$!
t0=$(now_ms); wait_exit "$pid" 30; ms=$(( $(now_ms) - t0 ))
result=FAIL; [ "$rc" = 86 ] && grep -q 'root cause: rank 1 stopped responding' err && result=PASS
row "a peer that never joins the ring" "$result" "root cause rank 1 after $ms ms (--comm-timeout 3), exit $rc"

# --- (h10-launcher's) a --summary that cannot be written keeps the job's exit code
fresh
mkdir sumdir
"$launch" --devices cpu --nproc_per_node 1 --summary sumdir/summary.json sh -c 'rm -rf sumdir; exit 3' >out 2>err &
wait_exit $! 20
result=FAIL; [ "$rc" = 3 ] && result=PASS
row "--summary write fails (h10-launcher)" "$result" "exit $rc (want the job's 3)"

# --- (h10-launcher's) one Slurm task per worker, task 0 missing: --elastic_timeout 2 is kept
fresh
t0=$(now_ms)
env SLURM_JOB_ID=$$ SLURM_STEP_ID=0 SLURM_NNODES=1 SLURM_STEP_NUM_NODES=1 SLURM_NODEID=0 SLURM_JOB_NODELIST=vm \
  SLURM_STEP_NODELIST=vm SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 SLURM_STEP_TASKS_PER_NODE=2 SLURM_TASKS_PER_NODE=2 \
  SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_STEP_LAUNCHER_PORT=$$ CUDA_VISIBLE_DEVICES= \
  "$launch" --elastic_timeout 2 true >out 2>err &
wait_exit $! 15; ms=$(( $(now_ms) - t0 ))
result=FAIL; [ "$rc" != 0 ] && [ "$rc" != 255 ] && [ "$ms" -le 5000 ] && result=PASS
row "Slurm task without task 0, --elastic_timeout 2 (h10-launcher)" "$result" \
    "$([ "$rc" = 255 ] && echo "still waiting after 15 s" || echo "exit $rc after $ms ms")"

# --- (rdzv, issue 22 item 11) IPv6: --master [::1]:PORT, the store and the endpoints on ::1
fresh
v6port="$("$py" -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1",0)); print(s.getsockname()[1])' 2>/dev/null)"
if [ -n "$v6port" ]; then
  export LAUNCH_STORE_TOKEN=0123456789abcdef0123456789abcdef-fault-matrix
  t0=$(now_ms)
  for n in 0 1; do
    "$launch" --nnodes 2 --master "[::1]:$v6port" --devices cpu --nproc_per_node 1 --log_dir log.$n \
      sh -c 'echo $PADDLE_CURRENT_ENDPOINT > ep.$RANK; '"$launch"' kv barrier all --timeout 10' >out.$n 2>err.$n &
    eval "v6_$n=\$!"
  done
  unset LAUNCH_STORE_TOKEN
  wait_exit "$v6_0" 20; rc0=$rc; wait_exit "$v6_1" 20; ms=$(( $(now_ms) - t0 ))
  result=FAIL
  [ "$rc0" = 0 ] && [ "$rc" = 0 ] && grep -q '^\[::1\]:' ep.0 && grep -q '^\[::1\]:' ep.1 && result=PASS
  row "IPv6: 2 launchers meet at [::1] (rdzv)" "$result" "both exit 0 after $ms ms, endpoints $(cat ep.0 2>/dev/null)"
else
  row "IPv6: 2 launchers meet at [::1] (rdzv)" "SKIP" "no IPv6 loopback here"
fi

# --- (rdzv, issue 21) torchrun's c10d form: three launches of one job on one host, no rank
fresh
master="127.0.0.1:$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export LAUNCH_STORE_TOKEN=0123456789abcdef0123456789abcdef-fault-matrix
t0=$(now_ms)
for n in 0 1 2; do
  "$launch" --nnodes 3 --rdzv-backend c10d --rdzv-endpoint "$master" --host 127.0.0.1 --devices cpu \
    --nproc_per_node 1 --log_dir log.$n sh -c "$launch kv barrier all --timeout 10" >out.$n 2>err.$n &
  eval "c10d_$n=\$!"
done
unset LAUNCH_STORE_TOKEN
ok=0
for n in 0 1 2; do eval "wait_exit \$c10d_$n 20"; [ "$rc" = 0 ] && ok=$((ok + 1)); done
ms=$(( $(now_ms) - t0 ))
result=FAIL; [ "$ok" = 3 ] && [ "$(grep -l "serving the job's store" err.* | wc -l)" = 1 ] && result=PASS
row "c10d form, 3 launches on one host, no rank (rdzv)" "$result" "$ok of 3 exit 0 after $ms ms, one serves the store"

# --- (rdzv, issue 21) --nnodes 2:3: a node's launcher killed, then a node joins
fresh
master="127.0.0.1:$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export LAUNCH_STORE_TOKEN=0123456789abcdef0123456789abcdef-fault-matrix
el_node() {
  "$launch" --nnodes 2:3 --rdzv-endpoint "$master" --host 127.0.0.1 --max_restart 2 --checkpoint-signal USR2 \
    --rdzv-conf last_call_timeout=1,keep_alive_interval=0.2,heartbeat_timeout=1,checkpoint_timeout=0.5 \
    --devices cpu --nproc_per_node 1 --log_dir log.$1 sh -c 'exec sleep 30' >out.$1 2>err.$1 &
  eval "el_$1=\$!"
}
el_node a; wait_for 'grep -q "serving the job" err.a 2>/dev/null' 10
el_node b; el_node c
wait_for 'grep -q "round 0: this is node" err.c 2>/dev/null' 10
t0=$(now_ms); kill -KILL "$el_c"; wait "$el_c" 2>/dev/null
wait_for 'grep -q "round 1: this is node 0 of 2" err.a 2>/dev/null' 15; loss=$(( $(now_ms) - t0 ))
t1=$(now_ms); el_node d
wait_for 'grep -q "round 2: this is node 0 of 3" err.a 2>/dev/null' 15; join=$(( $(now_ms) - t1 ))
unset LAUNCH_STORE_TOKEN
result=FAIL
grep -q "round 1: this is node 0 of 2" err.a && grep -q "round 2: this is node 0 of 3" err.a &&
  grep -q "SIGUSR2 to 1 worker(s) to save" err.a && result=PASS
for n in a b d; do eval "kill -TERM \$el_$n"; eval "wait_exit \$el_$n 10"; done
row "--nnodes 2:3: node lost, then a node joins (rdzv)" "$result" \
    "re-formed at 2 nodes $loss ms after the kill, at 3 $join ms after the join (heartbeat 1 s, save 0.5 s)"

# --- (rdzv, issue 21 item 3) over etcd (--rdzv-backend etcd; a real etcd on 127.0.0.1, Debian's
# etcd-server or $ETCD_BIN): the store's node lost, an endpoint nobody answers, a node of another
# job id, a wrong token
etcd_bin=${ETCD_BIN:-$(command -v etcd || true)}
etcd_rows=("etcd: the store's node lost, 2:3 (rdzv)" "etcd: endpoint not answering (rdzv)"
           "etcd: a node of another job id (rdzv)" "etcd: a node with a wrong token (rdzv)")
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fresh
ep="127.0.0.1:$(free_port)" peer="http://127.0.0.1:$(free_port)"
if [ -x "$etcd_bin" ]; then
  "$etcd_bin" --name fm --data-dir "$work/etcd" --listen-client-urls "http://$ep" --advertise-client-urls "http://$ep" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "fm=$peer" >etcd.log 2>&1 &
  etcd_pid=$!
  up='"$py" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)" "http://$ep/version"'
  wait_for "$up 2>/dev/null" 20 || etcd_bin=""
fi
if [ -x "$etcd_bin" ]; then
  export LAUNCH_STORE_TOKEN=0123456789abcdef0123456789abcdef-fault-matrix
  # A, the first node, serves the job's store (it claims it in etcd first); its loss does not end
  # the job: B and C evict its claim, one of them serves a fresh store, both run round 1.
  etcd_node() {  # etcd_node NAME JOB NNODES [OPTION...]: runs sleep 30 as its worker
    local name=$1 job=$2 nn=$3; shift 3
    "$launch" --nnodes "$nn" --rdzv-backend etcd --rdzv-endpoint "$ep" --job_id "$job" --host 127.0.0.1 "$@" \
      --devices cpu --nproc_per_node 1 --log_dir log.$name sh -c 'exec sleep 30' >out.$name 2>err.$name &
    eval "ed_$name=\$!"
  }
  conf=(--max_restart 2 --rdzv-conf last_call_timeout=1,keep_alive_interval=0.2,heartbeat_timeout=1)
  etcd_node a fm-lost 2:3 "${conf[@]}"; wait_for 'grep -q "serving the job" err.a 2>/dev/null' 10
  etcd_node b fm-lost 2:3 "${conf[@]}"; etcd_node c fm-lost 2:3 "${conf[@]}"
  wait_for 'grep -q "round 0: this is node" err.b 2>/dev/null && grep -q "round 0: this is node" err.c 2>/dev/null' 15
  t0=$(now_ms); kill -KILL "$ed_a"; wait "$ed_a" 2>/dev/null
  wait_for 'grep -q "round 1: this is node . of 2" err.b 2>/dev/null && grep -q "round 1: this is node . of 2" err.c 2>/dev/null' 20
  loss=$(( $(now_ms) - t0 ))
  new=$(grep -l "serving the job's store" err.b err.c | sed 's/^err\.//' | tr a-z A-Z | tr -d '\n')
  result=FAIL
  grep -q "round 1: this is node . of 2" err.b && grep -q "round 1: this is node . of 2" err.c &&
    [ ${#new} = 1 ] && result=PASS
  for n in b c; do eval "kill -TERM \$ed_$n"; eval "wait_exit \$ed_$n 10"; done
  row "${etcd_rows[0]}" "$result" "B and C run round 1 at 2 nodes $loss ms after A's kill, on $new's fresh store (heartbeat 1 s)"
  # Nobody at the endpoint: exit 1 at --elastic_timeout, one line, nothing run.
  nobody="127.0.0.1:$(free_port)"
  t0=$(now_ms)
  "$launch" --nnodes 2 --rdzv-backend etcd --rdzv-endpoint "$nobody" --elastic_timeout 2 --devices cpu \
    --log_dir log.x sh -c 'touch ran.x' >out.x 2>err.x & wait_exit $! 15; ms=$(( $(now_ms) - t0 ))
  result=FAIL
  [ "$rc" = 1 ] && [ "$(grep -c '^launch: error: ' err.x)" = 1 ] && grep -q "etcd at $nobody" err.x && [ ! -e ran.x ] && result=PASS
  row "${etcd_rows[1]}" "$result" "exit $rc after $ms ms (--elastic_timeout 2), $(grep -c '^launch: error: ' err.x) error line, nothing run"
  # The job: one node of fm-job waiting for a second. A node of another job id waits for its own
  # job's nodes and times out naming fm-job; a node with another token is refused at once.
  etcd_node j fm-job 2 --elastic_timeout 30
  wait_for 'grep -q "registered in job" err.j 2>/dev/null' 10
  t0=$(now_ms); etcd_node o fm-other 2 --elastic_timeout 2; wait_exit "$ed_o" 15; ms=$(( $(now_ms) - t0 ))
  result=FAIL; [ "$rc" = 1 ] && grep -q "other job id(s): 'fm-job' (1)" err.o && result=PASS
  row "${etcd_rows[2]}" "$result" "exit $rc after $ms ms (--elastic_timeout 2), naming job 'fm-job' (1 node) at the endpoint"
  t0=$(now_ms)
  LAUNCH_STORE_TOKEN=9f2c4e71b8a05d3e6c1f7a2b9d4e8c03-other etcd_node t fm-job 2; wait_exit "$ed_t" 15
  ms=$(( $(now_ms) - t0 ))
  result=FAIL; [ "$rc" = 2 ] && grep -q "runs with another token than this node's" err.t && kill -0 "$ed_j" 2>/dev/null &&
    result=PASS
  row "${etcd_rows[3]}" "$result" "exit $rc after $ms ms, the job's waiting node undisturbed"
  kill -TERM "$ed_j"; wait_exit "$ed_j" 10
  unset LAUNCH_STORE_TOKEN
else
  for r in "${etcd_rows[@]}"; do row "$r" SKIP "no etcd binary (apt-get install etcd-server, or set ETCD_BIN)"; done
fi
[ -n "${etcd_pid:-}" ] && { kill -KILL "$etcd_pid" 2>/dev/null; wait "$etcd_pid" 2>/dev/null; }


# --- issue 22, item 2: strangers on rank 0's ring port while it waits for its left neighbour, rank 2
# of 3 (rank 2's shell, which has the job's store, reads rank 0's address there first, as anyone who
# finds the port would; rank 0 serves its port once it has connected to rank 1)
fresh
cat > strangers.py <<'PY'
import os, socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
def hello(world, rank, job):
    body = struct.pack("<II", world, rank) + os.urandom(32) + struct.pack("<I", len(job)) + job
    return b"RNG1" + struct.pack("<III", 2, 1, len(body)) + body
def conn():
    s = socket.create_connection((host, int(port))); s.settimeout(5); return s
def answer(s):
    try:
        return s.recv(80)
    except OSError:
        return b""
held = [conn()]                                                        # idle: never says a word
for msg in (b"RNG1\x01\0\0\0\x03\0\0\0\x02\0\0\0\x07\0\0\0default",    # version 1's 20-byte hello
            hello(3, 2, b"otherjob"), hello(3, 1, b"default"), hello(2, 2, b"default")):
    s = conn(); s.sendall(msg); answer(s); s.close()                   # wrong version, job, rank, world
s = conn(); s.sendall(hello(3, 2, b"default"))                         # "rank 2" without the token
if len(answer(s)) == 80: s.sendall(b"RNG1" + struct.pack("<III", 2, 3, 32) + bytes(32))
answer(s); s.close()
held.append(conn())                                                    # idle again, as the real rank 2 joins
print("sent", flush=True)
time.sleep(3)
PY
"$launch" --devices cpu --nproc_per_node 3 --grace 5 sh -c \
  'if [ $RANK = 2 ]; then a=$('"$launch"' kv get ring/world/0/addr/0 --timeout 20) && { '"$py"' strangers.py "$a" > sent & }
     until [ -s sent ]; do sleep 0.01; done; date +%s%3N > joined; fi
   exec '"$train ${TA[*]}"' --num-samples 64 --epochs 1 --log-every 1' >out 2>err &
pid=$!
wait_exit "$pid" 60; t_end=$(now_ms)
refused=$(grep -c 'rank 0: ring setup: refused a connection' log/workerlog.0)
closed=$(grep -o 'closed [0-9]* other connection(s) still setting up' log/workerlog.0 | grep -o '[0-9]*')
joined=$(cat joined 2>/dev/null || echo "$t_end")
result=FAIL
[ "$rc" = 0 ] && [ "$refused" = 5 ] && [ "${closed:-0}" -ge 1 ] && grep -q 'Checksums: all 3 rank(s) agree' log/workerlog.0 &&
  result=PASS
row "ring port: idle, v1, wrong job/rank/world, no token (item 2)" "$result" \
    "exit $rc; rank 0 refused $refused hellos, closed ${closed:-0} idle, trained on; rank 2 joined to job end $((t_end - joined)) ms"

# --- issue 22, items 3 and 5: a FIFO, a 2 GB sparse non-JPEG and a 64 GB sparse "JPEG" in a list file
fresh
mkdir img
"$py" -c 'from PIL import Image
for i in range(13): Image.new("RGB", (40, 40), (i * 15, 80, 160)).save(f"img/{i}.png")'
mkfifo img/fifo.jpg
truncate -s 2G img/sparse2g.jpg
printf '\377\330\377\340' > img/sparse64g.jpg && truncate -s 64G img/sparse64g.jpg
{ for i in $(seq 0 12); do echo "img/$i.png $((i % 2))"; done
  echo "img/fifo.jpg 0"; echo "img/sparse2g.jpg 1"; echo "img/sparse64g.jpg 0"; } > list.txt
cat > peak.py <<'PY'
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], timeout=60)
print("peak_mb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, flush=True)
sys.exit(p.returncode)
PY
t0=$(now_ms)
"$py" peak.py "$train" "${TA[@]}" --data list.txt --epochs 2 >out 2>err &
wait_exit $! 70; ms=$(( $(now_ms) - t0 ))
peak=$(sed -n 's/^peak_mb //p' out)
fifo=$(grep -c '/img/fifo.jpg: cannot read: a FIFO' err)
result=FAIL; [ "$rc" = 0 ] && [ "$fifo" = 1 ] && result=PASS
row "a list-file entry that is a FIFO (item 3)" "$result" "exit $rc after $ms ms (2 epochs), one warning naming it (was: hung forever)"
big=$(grep -c '/img/sparse2g.jpg: cannot read: not a JPEG or PNG' err)
huge=$(grep -c '/img/sparse64g.jpg: cannot read: 68719476736 bytes, more than --max-image-bytes' err)
result=FAIL; [ "$rc" = 0 ] && [ "$big" = 1 ] && [ "$huge" = 1 ] && [ -n "$peak" ] && [ "$peak" -lt 300 ] && result=PASS
row "2 GB and 64 GB sparse .jpg files (item 5)" "$result" "peak RSS ${peak:-?} MB (was: 2.27 GB), each named with its own reason"

# --- issue 22, item 6: a flipped bit in a checkpoint's tensor, a NaN weight
fresh
"$train" "${TA[@]}" --num-samples 64 --max-steps 2 --save ck.safetensors >out 2>err
cat > corrupt.py <<'PY'
import json, struct
raw = bytearray(open("ck.safetensors", "rb").read())
(n,) = struct.unpack("<Q", raw[:8]); h = json.loads(raw[8:8 + n])
b, e = h["layer1.0.conv1.weight"]["data_offsets"]
raw[8 + n + (b + e) // 2] ^= 0x04
open("flipped.safetensors", "wb").write(raw)
raw[8 + n + (b + e) // 2] ^= 0x04
# Another writer's file (no checksums) with a NaN weight.
h["__metadata__"] = {k: v for k, v in h["__metadata__"].items() if not k.startswith("xxh3_64.")}
b, _ = h["fc.weight"]["data_offsets"]
raw[8 + n + b:8 + n + b + 4] = struct.pack("<f", float("nan"))
hj = json.dumps(h).encode(); hj += b" " * (-len(hj) % 8)
open("nan.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + raw[8 + n:])
PY
"$py" corrupt.py && cp ck.train.safetensors flipped.train.safetensors
t0=$(now_ms); "$train" "${TA[@]}" --num-samples 64 --max-steps 4 --resume flipped.safetensors >out 2>err; rc=$?
ms=$(( $(now_ms) - t0 ))
result=FAIL
[ "$rc" = 1 ] && grep -q "flipped.safetensors': tensor 'layer1.0.conv1.weight': its bytes do not match the checksum" err &&
  result=PASS
row "a flipped bit in a checkpoint (item 6)" "$result" "refused in $ms ms, exit $rc, file and tensor named (was: trained on)"
"$train" "${TA[@]}" --num-samples 64 --max-steps 4 --init nan.safetensors >out 2>err; rc=$?
result=FAIL; [ "$rc" = 1 ] && grep -q "nan.safetensors: tensor 'fc.weight' holds NaN" err && ! grep -q "loss is" err && result=PASS
row "a NaN weight in a checkpoint (item 6)" "$result" "exit $rc at load, file and tensor named (was: 'training diverged' later)"

# --- issue 22, item 13: a store that accepts and never answers
fresh
cat > silent.py <<'PY'
import os, socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
env = dict(os.environ, PADDLE_TRAINER_ID="0", PADDLE_TRAINERS_NUM="2",
           LAUNCH_STORE_ADDR="127.0.0.1:%d" % s.getsockname()[1], LAUNCH_STORE_TOKEN="0123456789abcdef" * 4)
sys.exit(subprocess.run(sys.argv[1:], env=env, timeout=90).returncode)
PY
t0=$(now_ms)
"$py" silent.py "$train" "${TA[@]}" --comm-timeout 2 >out 2>err &
wait_exit $! 100; ms=$(( $(now_ms) - t0 ))
result=FAIL; [ "$rc" = 1 ] && grep -q 'no reply from the store' err && [ "$ms" -lt 10000 ] && result=PASS
row "a store that never answers, --comm-timeout 2 (item 13)" "$result" "gave up after $ms ms, exit $rc (was: 60 s whatever the option)"

# --- issue 22, item 14: rank 1 started with another --optimizer
fresh
t0=$(now_ms)
"$launch" --devices cpu --nproc_per_node 2 sh -c \
  'exec '"$train ${TA[*]}"' --num-samples 100000 --epochs 1 $([ $RANK = 1 ] && echo --optimizer sgd)' >out 2>err &
wait_exit $! 60; ms=$(( $(now_ms) - t0 ))
# (launch's report carries the error of the rank that exits first; the other may be ended by the
# teardown before it writes its own)
result=FAIL; [ "$rc" = 2 ] && grep -q -- '--optimizer sgd on rank 1, adam on rank 0' err && result=PASS
row "a rank with another --optimizer (item 14)" "$result" \
    "refused at start-up after $ms ms, exit $rc, both values named (was: found by the final checksums, or never)"

# --- issue 22, item 15: --resume naming a folder
fresh
"$train" "${TA[@]}" --num-samples 64 --max-steps 1 --save ck/run.safetensors >out 2>err
"$train" "${TA[@]}" --num-samples 64 --resume ck >out 2>err; rc=$?
result=FAIL; [ "$rc" = 1 ] && grep -q "is a folder, not a checkpoint" err && grep -q "in it: ck/run.safetensors" err && result=PASS
row "--resume DIR (item 15)" "$result" "exit $rc, its checkpoint named: $(grep -o 'in it: [^;]*' err) (was: 'does not exist')"
# --- issue 22, item 7: a worker stuck in D state (a FUSE file system that never answers)
fresh
if [ ! -x "$bin/fuse_hold" ]; then
  row "a worker in D state (FUSE held)" SKIP "no $bin/fuse_hold (build the fuse_hold target)"
else
  mkdir mnt
  mkfifo hold
  "$bin/fuse_hold" "$PWD/mnt" <hold >fuse.out 2>&1 &
  fuse=$!
  exec 4>hold  # the helper's stdin: closing it lets every held request go
  wait_for 'grep -q "ready\|SKIPPED" fuse.out' 10
  if ! grep -q ready fuse.out; then
    exec 4>&-; wait "$fuse" 2>/dev/null
    row "a worker in D state (FUSE held)" SKIP "$(head -1 fuse.out)"
  else
    "$launch" --devices cpu --nproc_per_node 2 --grace 0.5 sh -c \
      'if [ $RANK = 0 ]; then exec cat '"$PWD"'/mnt/x; fi; while [ ! -e go ]; do sleep 0.01; done; exit 3' >out 2>err 4>&- &
    pid=$!
    wait_for 'grep -q "^held 1 " fuse.out' 20
    stuck=$(sed -n 's/^held 1 //p' fuse.out | head -1)
    touch go; wait_exit "$pid" 30
    cg=$(grep -o "they stay in the job's cgroup [^ ]*" err | head -1 | awk '{print $NF}')
    named=$(grep -c "1 process(es) could not be killed: pid $stuck (cat $PWD/mnt/x, state D" err)
    t0=$(now_ms); exec 4>&-; wait "$fuse" 2>/dev/null
    gone=-1
    if [ -n "$cg" ]; then wait_for '[ ! -e "$cg" ]' 10 && gone=$(( $(now_ms) - t0 )); fi
    umount -l "$PWD/mnt" 2>/dev/null
    result=FAIL
    [ "$rc" = 3 ] && [ "$named" = 1 ] && ! grep -q '2 process(es)' err && { [ -z "$cg" ] || [ "$gone" -ge 0 ]; } &&
      result=PASS
    row "a worker in D state (FUSE held)" "$result" \
        "exit $rc, 1 process named (pid $stuck, D)$([ -n "$cg" ] && echo ", cgroup removed $gone ms after it could die")"
  fi
fi

# --- issue 22, item 8: --max_restart 50 with a worker that always fails; SIGTERM in the back-off
fresh
"$launch" --devices cpu --nproc_per_node 1 --max_restart 50 sh -c 'touch gen.$PADDLE_RESTART_COUNT; exit 1' >out 2>err &
pid=$!
wait_for '[ -e gen.2 ]' 10
gens=$(ls gen.* 2>/dev/null | wc -l)
wait_for 'grep -q "restarting all 1 worker(s) in 4 s" err' 10
t0=$(now_ms); kill -TERM "$pid"; wait_exit "$pid" 10; ms=$(( $(now_ms) - t0 ))
result=FAIL; [ "$gens" -le 3 ] && [ "$rc" = 1 ] && [ "$ms" -le 1000 ] && result=PASS
row "crash loop: --max_restart 50, always failing" "$result" \
    "$gens generations in the first 3 s (waits of 1, 2, 4 s); SIGTERM in the wait: exit $rc after $ms ms"

# --- issue 22, item 9: a second launch on the same --log_dir
fresh
"$launch" --devices cpu --nproc_per_node 1 sh -c 'touch up; exec sleep 60' >out.1 2>err.1 &
first=$!
wait_for '[ -e up ]' 10
t0=$(now_ms); "$launch" --devices cpu --nproc_per_node 1 true >out.2 2>err.2; rc=$?; ms=$(( $(now_ms) - t0 ))
kill -TERM "$first"; wait "$first" 2>/dev/null
result=FAIL; [ "$rc" = 2 ] && grep -q "is in use: another launch (pid $first)" err.2 && result=PASS
row "two launches on one --log_dir" "$result" "the second refused in $ms ms (exit $rc), naming pid $first"

# --- issue 22, item 10: one authenticated client writes 500,000 keys of 1 KiB
fresh
"$launch" --devices cpu --nproc_per_node 1 sh -c \
  'echo $LAUNCH_STORE_ADDR > addr; echo $LAUNCH_STORE_TOKEN > token; while [ ! -e go ]; do sleep 0.02; done' >out 2>err &
pid=$!
wait_for '[ -s token ]' 20
flood=$("$py" - "$(cut -d: -f2 addr)" "$(cat token)" "$pid" <<'EOF'
import socket, struct, sys
port, token, pid = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]
def s(b): return struct.pack("<I", len(b)) + b
def frame(op, payload): return b"LSTR\x02" + bytes([op]) + b"\0\0" + struct.pack("<Q", len(payload)) + payload
c = socket.create_connection(("127.0.0.1", port))
buf = b""
def replies(n):  # the status byte of each of the next n replies
    global buf
    out = []
    while True:
        while len(buf) >= 16 and len(out) < n:
            ln = struct.unpack_from("<Q", buf, 8)[0]
            if len(buf) < 16 + ln: break
            out.append(buf[6]); buf = buf[16 + ln:]
        if len(out) == n: return out
        got = c.recv(1 << 20)
        if not got: sys.exit("the store closed the connection")
        buf += got
c.sendall(frame(1, s(b"default") + s(token) + s(b"flood")))
assert replies(1) == [0]
value, ok, quota = b"v" * 1024, 0, 0
for i in range(0, 500000, 1000):
    c.sendall(b"".join(frame(2, s(b"flood/%d" % k) + s(value)) for k in range(i, i + 1000)))
    for st in replies(1000):
        ok += st == 0; quota += st == 12
hwm = [l for l in open("/proc/%s/status" % pid) if l.startswith("VmHWM")][0].split()[1]
print(ok, quota, int(hwm) // 1024)
EOF
)
touch go; wait_exit "$pid" 20
read -r ok quota peak <<<"$flood"
result=FAIL; [ -n "${peak:-}" ] && [ "$peak" -lt 160 ] && [ "${quota:-0}" -gt 0 ] && [ "$rc" = 0 ] && result=PASS
row "500,000 keys from one authenticated client" "$result" \
    "${ok:-?} stored, ${quota:-?} refused (QUOTA_EXCEEDED); launcher peak RSS ${peak:-?} MB, job exit $rc"

# --- issue 22, item 12: the port-lock folder planted as a file by someone else
fresh
mkdir tmp && touch "tmp/launch-$(id -u)"
TMPDIR="$PWD/tmp" "$launch" --devices cpu --nproc_per_node 1 true >out 2>err; rc=$?
result=FAIL; [ "$rc" = 2 ] && grep -q "launch-$(id -u) is a regular file, not a directory of yours" err && result=PASS
row "port-lock folder planted as a regular file" "$result" "exit $rc: $(grep -o 'is a regular file[^(]*' err | head -1)"

# --- issue 22, item 15: the report above a restart; 100,000 arguments; a guessable token
fresh
"$launch" --devices cpu --nproc_per_node 1 --max_restart 1 --restart-backoff 0 sh -c \
  '[ $PADDLE_RESTART_COUNT = 0 ] && kill -KILL $$; exit 0' >out 2>err
rc=$?
first=$(grep -m1 'root cause: rank 0 killed by SIGKILL' err | sed 's/.*(pid [^)]*)//')
result=FAIL; [ "$rc" = 0 ] && [ "$first" = "; restart 1 of 1 follows" ] && ! grep -q 'launch exits with 137' err && result=PASS
row "the report above a restart" "$result" "\"...$first\", then exit $rc"
fresh
"$launch" --devices cpu --nproc_per_node 1 true $(seq 1 100000) >out 2>err; rc=$?
longest=$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' err)
result=FAIL; [ "$rc" = 0 ] && [ "$longest" -le 2048 ] && grep -q 'more argument(s)' err && result=PASS
row "100,000 arguments" "$result" "longest log line $longest bytes, exit $rc"
fresh
LAUNCH_STORE_TOKEN=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "$launch" --nnodes 2 --master 127.0.0.1:1 true >out 2>err; rc=$?
result=FAIL; [ "$rc" = 2 ] && grep -q 'guessable.*openssl rand -hex 32' err && result=PASS
row "36 times one letter as the token" "$result" "exit $rc: $(grep -o 'guessable: [^(]*' err | head -1)"

echo
echo "containment in force: ${containment#containment: }; $(nproc) cores; $(uname -r)"
exit "$failed"
