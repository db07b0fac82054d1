#!/usr/bin/env bash
# The image pipeline's checks on the GPU machine (issue 11), one command, with binaries built
# elsewhere and carried in .gpu/ (scripts/gpu_pack.sh): the [gpu] test (GPU loader against the
# CPU loader), training from JPEGs on 1 GPU and on 2 GPUs (when there are 2) with both loaders,
# and scripts/bench_data.sh (loaders alone, end to end). Every item runs even when an earlier one
# fails; logs go to $OUT (default out/gpu_data), the summary table is printed last.
#   GPU_BIN  binaries (default .gpu/bin, else build/bin)   THREADS, BENCH_* as scripts/bench_data.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${GPU_BIN:-$root/.gpu/bin}"
[ -x "$BIN/test_worker_gpu_data" ] || BIN="$root/build/bin"
export GPU_BIN="$BIN"
OUT="${OUT:-$root/out/gpu_data}"
mkdir -p "$OUT"
SP="$(python3 -c 'import site; print(site.getsitepackages()[0])')"
export LD_LIBRARY_PATH="$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}:$BIN/../lib"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
rows=()
row() { rows+=("$(printf '%-52s %-5s %s' "$1" "$2" "$3")"); echo "[$(date +%T)] $1: $2 $3"; }
verdict() { [ "$1" -eq 0 ] && echo PASS || echo FAIL; }

timeout 240 "$BIN/test_worker_gpu_data" > "$OUT/test_worker_gpu_data.log" 2>&1
row "[gpu] GPU loader vs CPU loader" "$(verdict $?)" "$(grep -E 'worst|passed|FAILED' "$OUT/test_worker_gpu_data.log" | tr '\n' ';' | cut -c1-200)"

ds="$(mktemp -d)"
trap 'rm -rf "$ds"' EXIT
python3 "$root/tests/worker/data/make_dataset.py" "$ds/small" > "$OUT/make_dataset.log" 2>&1
small=(--depth 18 --width 32 --image-size 64 --batch-size 32 --optimizer sgd --lr 0.05 --epochs 4 --log-every 2)
train() {  # name, launch args...
  local name=$1; shift
  timeout 120 "$BIN/launch" --log_dir "$OUT/log_$name" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local ok=1
  [ $rc -eq 0 ] && grep -q 'Checksums: all' "$OUT/$name.log" && grep -q 'unreadable image read(s) skipped' "$OUT/$name.log" && ok=0
  row "train from JPEGs: $name" "$(verdict $ok)" "$({ grep -E '^Data: ImageFolder' "$OUT/$name.log" | sed 's/ImageFolder [^:]*: //' | cut -c1-160; grep -o 'data wait: [0-9.]* ms/step' "$OUT/$name.log" | tail -1; grep -o '[0-9]* unreadable image read(s) skipped' "$OUT/$name.log"; } | tr '\n' ';')"
}
train 1gpu_gpu_loader --gpus 0 "$BIN/train_resnet" "${small[@]}" --data "$ds/small" --loader gpu
train 1gpu_cpu_loader --gpus 0 "$BIN/train_resnet" "${small[@]}" --data "$ds/small" --loader cpu
if [ "$ngpu" -ge 2 ]; then
  train 2gpu_gpu_loader --gpus 0,1 "$BIN/train_resnet" "${small[@]}" --data "$ds/small"
fi

timeout 420 "$root/scripts/bench_data.sh" > "$OUT/bench_data.log" 2>&1
row "scripts/bench_data.sh" "$(verdict $?)" "(table below)"

echo
for r in "${rows[@]}"; do echo "$r"; done
echo
sed -n '/^images\/s (median/,$p' "$OUT/bench_data.log"
