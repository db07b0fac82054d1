#!/usr/bin/env bash
# Same-machine A/B of the GPU backend's knobs (docs/environment.md) on the GPU machine: ResNet-50
# (fp16, batch 256 by default) through gpu_model_driver bench --graph 1 under each environment
# variant, the variants alternating round by round so that a drift of the machine hits them all; then,
# with AB_TRAINER=1, `launch --gpus 0 train_resnet` under each variant once (the median of its 50-step
# windows after the first, which holds the engines' tuning). Prints, per variant, every run's images/s,
# their median and its ratio to the first variant's median. The machines are shared and noisy: read
# a difference smaller than the spread of one variant's runs as none.
# Usage: scripts/bench_ab.sh VARIANT [VARIANT ...]
#   VARIANT  space-separated VAR=VALUE settings, "" for the defaults; AB_BIN=DIR among them runs that
#            folder's binaries instead (another build's, e.g. with other compile-time constants), e.g.
#            scripts/bench_ab.sh "" "WORKER_DW_BATCHED=0" "AB_BIN=.gpu/v1"
#   AB_PRECISION=fp16  AB_DEPTH=50  AB_BATCH=256  AB_ROUNDS=3  AB_TRAINER=0  AB_STEPS=300
#   AB_ARGS="--steps-per-window 8 --windows 4"   more gpu_model_driver arguments
#   GPU_BIN  folder of our binaries (default .gpu/bin, else build/bin); OUT  where logs go (out/gpu)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: scripts/bench_ab.sh VARIANT [VARIANT ...] (\"\" for the defaults)" >&2; exit 2; }
# shellcheck source=scripts/gpu_env.sh
. "$root/scripts/gpu_env.sh"
gpu_env gpu_model_driver
check_variants bench_ab "$@"
OUT="${OUT:-$root/out/gpu}"
log="$OUT/ab"
mkdir -p "$log"
prec="${AB_PRECISION:-fp16}" depth="${AB_DEPTH:-50}" batch="${AB_BATCH:-256}" rounds="${AB_ROUNDS:-3}"
read -r -a extra <<< "${AB_ARGS:---steps-per-window 8 --windows 4}"
# The binaries' folder of a variant: its AB_BIN, else BIN.
bin_of() {
  local kv b="$BIN"
  for kv in $1; do [[ "$kv" == AB_BIN=* ]] && b="${kv#AB_BIN=}"; done
  echo "$b"
}
for v in "$@"; do
  [ -x "$(bin_of "$v")/gpu_model_driver" ] || { echo "bench_ab: no gpu_model_driver in $(bin_of "$v")" >&2; exit 2; }
done
results="$log/runs.tsv"
: > "$results"

for ((r = 1; r <= rounds; r++)); do
  i=0
  for v in "$@"; do
    i=$((i + 1))
    f="$log/driver_v${i}_r${r}.json"
    # shellcheck disable=SC2086  # the variant's words are the settings
    env $v timeout 300 "$(bin_of "$v")/gpu_model_driver" bench --depth "$depth" --batch "$batch" --precision "$prec" \
      --graph 1 "${extra[@]}" > "$f" 2> "$log/driver_v${i}_r${r}.err"
    ips="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["images_per_s"])' "$f" 2>/dev/null || echo fail)"
    printf 'driver\t%s\t%s\n' "$i" "$ips" >> "$results"
    echo "[$(date +%T)] round $r, variant $i (${v:-defaults}): driver $ips images/s"
  done
done

if [ "${AB_TRAINER:-0}" = 1 ]; then
  i=0
  for v in "$@"; do
    i=$((i + 1))
    d="$log/trainer_v$i"
    rm -rf "$d"
    # shellcheck disable=SC2086
    env $v timeout 400 "$(bin_of "$v")/launch" --gpus 0 --log-dir "$d" "$(bin_of "$v")/train_resnet" --depth "$depth" \
      --batch-size "$batch" --optimizer sgd --lr 0.1 --momentum 0.9 --weight-decay 1e-4 --data random \
      --num-samples 1000000 --max-steps "${AB_STEPS:-300}" --log-every 50 --precision "$prec" \
      > "$log/trainer_v$i.log" 2>&1
    ips="$(python3 - "$log/trainer_v$i.log" <<'EOF'
import re, statistics, sys
w = [float(x) for x in re.findall(r"images/s: ([0-9.]+)", open(sys.argv[1]).read())]
print(statistics.median(w[1:]) if len(w) > 1 else "fail")
EOF
)"
    printf 'trainer\t%s\t%s\n' "$i" "$ips" >> "$results"
    echo "[$(date +%T)] variant $i (${v:-defaults}): trainer $ips images/s (median of its windows after the first)"
  done
fi

python3 - "$results" "$@" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
variants = sys.argv[2:]
print("\nA/B, images/s (%s)" % sys.argv[1])
print("| what | variant | runs | median | vs variant 1 |")
print("|---|---|---|---|---|")
for what in ("driver", "trainer"):
    base = None
    for i, v in enumerate(variants, 1):
        runs = [r[2] for r in rows if r[0] == what and r[1] == str(i)]
        if not runs:
            continue
        ok = [float(x) for x in runs if x != "fail"]
        med = statistics.median(ok) if ok else None
        if i == 1:
            base = med
        ratio = "%.3f" % (med / base) if med and base else "-"
        print("| %s | %s | %s | %s | %s |" % (what, v or "defaults", " / ".join(
            ("%.0f" % float(x)) if x != "fail" else x for x in runs), "%.0f" % med if med else "fail", ratio))
EOF
