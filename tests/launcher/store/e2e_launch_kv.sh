#!/usr/bin/env bash
# End to end: `launch` starts the store for a CPU job; shell workers exchange values with
# `launch kv`, meet at a barrier, and see the store on 127.0.0.1 only; a failing worker makes
# `launch` exit with its code at once instead of leaving the others blocked in the store.
#   e2e_launch_kv.sh BIN_DIR   (the folder holding `launch`)
set -euo pipefail
bin_dir="$(cd "$1" && pwd)"
export PATH="$bin_dir:$PATH"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

# 1. Ring exchange through the store.
out="$(timeout 60 launch --devices cpu --nproc_per_node 4 --stream all --log_level error sh -c \
  'launch kv set peer/$PADDLE_TRAINER_ID v$PADDLE_TRAINER_ID && launch kv barrier start &&
   echo "got $(launch kv get peer/$((($PADDLE_TRAINER_ID+1)%4)) --timeout 20)"')"
for r in 0 1 2 3; do
  grep -q "got v$(( (r + 1) % 4 ))" <<<"$out" || { echo "FAIL: rank $r did not read its neighbour: $out"; exit 1; }
done

# 2. The store listens on 127.0.0.1 only.
out="$(timeout 60 launch --devices cpu --nproc_per_node 1 --stream all --log_level error sh -c \
  'ss -ltnH "sport = :${LAUNCH_STORE_ADDR##*:}"')"
local_addrs="$(grep -oE "LISTEN +[0-9]+ +[0-9]+ +[^ ]+" <<<"$out" | awk '{print $4}')"
[ -n "$local_addrs" ] || { echo "FAIL: ss shows no listener for the store: $out"; exit 1; }
if grep -qv "^127\.0\.0\.1:" <<<"$local_addrs"; then echo "FAIL: store not on 127.0.0.1 only: $out"; exit 1; fi

# 3. Rank 2 fails; ranks 0 and 1, blocked for 60 s in the store, do not hold the job up.
start=$(date +%s)
set +e
timeout 60 launch --devices cpu --nproc_per_node 3 --log_level error --grace 5 sh -c \
  'if [ "$PADDLE_TRAINER_ID" = 2 ]; then exit 3; fi; launch kv get never --timeout 60' >/dev/null 2>&1
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
[ "$rc" = 3 ] || { echo "FAIL: launch exited $rc, expected rank 2's code 3"; exit 1; }
[ "$elapsed" -lt 10 ] || { echo "FAIL: took ${elapsed}s to finish after rank 2 failed"; exit 1; }
echo "e2e launch kv: OK"
