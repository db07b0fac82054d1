#!/usr/bin/env bash
# A job killed mid-run and restarted by `launch --max_restart 1` ends with the same parameters as
# one that was not (CPU, fixed seed): rank 1 is SIGKILLed in the first run once a checkpoint
# exists; the second run resumes (train_resnet --resume auto) and finishes. The final parameter
# checksums of both jobs must agree.
#   tests/launcher/restart_resume.sh PATH/TO/launch PATH/TO/train_resnet
set -euo pipefail
launch="$1"
train="$2"
dir="$(mktemp -d /tmp/launch-resume-XXXXXX)"
trap 'rm -rf "$dir"' EXIT
args=(--depth 18 --width 8 --image-size 32 --batch-size 4 --num-samples 64 --max-steps 40 --seed 7 --log-every 100)

# The reference: not interrupted.
"$launch" --devices cpu --nproc_per_node 2 --log_dir "$dir/ref" "$train" "${args[@]}" \
  --save "$dir/ref.safetensors" >"$dir/ref.out" 2>"$dir/ref.err"
ref="$(grep -o 'params checksum fnv1a64=[0-9a-f]*' "$dir/ref.out")"

# The interrupted job. The wrapper kills rank 1's trainer (not itself) in the first run, as soon
# as a complete checkpoint exists (its training state is written last); bounded at 20 s.
cat >"$dir/worker.sh" <<WRAP
#!/bin/sh
if [ "\$PADDLE_RESTART_COUNT" = 0 ] && [ "\$RANK" = 1 ]; then
  "$train" "\$@" & pid=\$!
  i=0
  while [ ! -e "$dir/ck.train.safetensors" ] && [ \$i -lt 4000 ]; do sleep 0.005; i=\$((i + 1)); done
  kill -9 \$pid
  echo "killed rank 1's trainer"
  exit 137
fi
exec "$train" "\$@"
WRAP
chmod +x "$dir/worker.sh"
rc=0
"$launch" --devices cpu --nproc_per_node 2 --max_restart 1 --log_dir "$dir/run" "$dir/worker.sh" "${args[@]}" \
  --save "$dir/ck.safetensors" --save-every 4 --resume auto >"$dir/run.out" 2>"$dir/run.err" || rc=$?
got="$(grep -o 'params checksum fnv1a64=[0-9a-f]*' "$dir/run.out" || true)"

fail() { echo "FAILED: $*"; echo "--- launch stderr:"; cat "$dir/run.err"; echo "--- rank 1:"; cat "$dir/run/workerlog.1"; exit 1; }
[ "$rc" = 0 ] || fail "the restarted job exited with $rc"
grep -q "rank 1 exited with code 137" "$dir/run.err" || fail "rank 1 was not killed in the first run"
grep -q "restart 1 of 1" "$dir/run.err" || fail "no restart"
grep -q "killed rank 1's trainer" "$dir/run/workerlog.1" || fail "the wrapper did not kill the trainer"
[ -n "$ref" ] || fail "no checksum from the reference run"
[ "$got" = "$ref" ] || fail "final parameters differ: restarted '$got', uninterrupted '$ref'"
echo "OK: killed at a checkpoint, restarted, resumed: $got (same as uninterrupted)"
