#!/usr/bin/env bash
# bf16 against fp16 per model on the GPU machine: which one `--precision auto` should pick
# (worker/train/precision.h). `launch --gpus 0 train_resnet --data random` for each model of
# PREC_MODELS, once in bf16 and once in fp16, alternating; images/s is the median of the log's
# windows after the first two (they hold the convolution engines' tuning). Prints one row per model:
# bf16, fp16 and fp16 / bf16.
# Usage: scripts/bench_precision.sh
#   PREC_MODELS  ';'-separated models, each "STEPS train_resnet-arguments" (default: ResNet-18 width 32
#                with the CIFAR stem at 32 px batch 128, and ResNet-18/34/50/101 at 224 px batch 256)
#   PREC_EXTRA   more train_resnet arguments for every run;  GPU_BIN, OUT as in scripts/bench_ab.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/gpu_env.sh
. "$root/scripts/gpu_env.sh"
gpu_env train_resnet
OUT="${OUT:-$root/out/gpu}/precision"
mkdir -p "$OUT"
models="${PREC_MODELS:-1500 --depth 18 --width 32 --stem cifar --image-size 32 --batch-size 128;\
300 --depth 18 --batch-size 256;300 --depth 34 --batch-size 256;300 --depth 50 --batch-size 256;\
200 --depth 101 --batch-size 256}"
read -r -a extra <<< "${PREC_EXTRA:-}"
rows=()
i=0
IFS=';' read -r -a list <<< "$models"
for m in "${list[@]}"; do
  i=$((i + 1))
  read -r steps args <<< "$m"
  read -r -a a <<< "$args"
  every=$((steps / 10))
  res=()
  for p in bf16 fp16; do
    log="$OUT/m${i}_$p.log"
    timeout 400 "$BIN/launch" --gpus 0 --log-dir "$OUT/log_m${i}_$p" "$BIN/train_resnet" --data random \
      --num-samples 10000000 --optimizer sgd --lr 0.1 --momentum 0.9 --weight-decay 1e-4 --max-steps "$steps" \
      --log-every "$every" --precision "$p" "${a[@]}" "${extra[@]}" > "$log" 2>&1
    ips="$(python3 - "$log" <<'EOF'
import re, statistics, sys
w = [float(x) for x in re.findall(r"images/s: ([0-9.]+)", open(sys.argv[1]).read())]
print("%.0f" % statistics.median(w[2:]) if len(w) > 2 else "fail")
EOF
)"
    res+=("$ips")
    echo "[$(date +%T)] $args $p: $ips images/s" >&2
  done
  ratio="$(python3 -c 'import sys; a, b = sys.argv[1:]; print("%.3f" % (float(b) / float(a)))' "${res[0]}" "${res[1]}" 2>/dev/null || echo -)"
  rows+=("$(printf '| %s | %s | %s | %s |' "$args" "${res[0]}" "${res[1]}" "$ratio")")
done
echo
echo "| model (train_resnet --data random) | bf16 images/s | fp16 images/s | fp16 / bf16 |"
echo "|---|---|---|---|"
for r in "${rows[@]}"; do echo "$r"; done
