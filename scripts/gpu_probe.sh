#!/usr/bin/env bash
# The cuDNN fusion probe (tests/worker/gpu/cudnn_fusion_probe.cu) on the GPU machine, from binaries built
# elsewhere and carried: which fused conv + batch-norm graphs cuDNN runs on ResNet-50's layers, and what
# each saves per training step against the trainer's unfused chain.
#
# Before (on the build machine, in a build folder with the GPU backend; the probe is EXCLUDE_FROM_ALL):
#   cmake --build build -j2 --target cudnn_fusion_probe launch train_resnet test_worker_gpu gpu_model_driver
#   scripts/gpu_pack.sh build            # copies the probe into .gpu/bin when it was built
# Then on the GPU machine (device tool, carry [".gpu"], one GPU is enough):
#   bash scripts/gpu_probe.sh [probe options, e.g. --only 'l3\.' --plans 3; the budget is GPU_PROBE_BUDGET_S]
# Time: at most 6 minutes of wall clock: the probe's rows stop starting after GPU_PROBE_BUDGET_S (default
# 300 s) and it is killed 40 s after that; what finished is in the log either way.
# Output: $OUT (default out/probe) holds probe.log (every row as it finished) and summary.md (the Markdown
# tables); the summary is printed last. Exit: the probe's (0 done, 1 stopped by a GPU error, 124 killed at
# the time limit), 77 without a GPU, 1 without the probe binary, 2 a bad GPU_PROBE_BUDGET_S.
#   GPU_BIN  folder of the probe binary (default .gpu/bin, else build/bin, else build-gpu/bin)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
probe=""
for d in "${GPU_BIN:-$root/.gpu/bin}" "$root/build/bin" "$root/build-gpu/bin"; do
  if [ -x "$d/cudnn_fusion_probe" ]; then probe="$d/cudnn_fusion_probe"; break; fi
done
if [ -z "$probe" ]; then
  echo "gpu_probe: no cudnn_fusion_probe in ${GPU_BIN:-$root/.gpu/bin}, $root/build/bin or $root/build-gpu/bin:" \
       "build it (cmake --build build --target cudnn_fusion_probe), pack it (scripts/gpu_pack.sh build) and carry .gpu" >&2
  exit 1
fi
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
  echo "gpu_probe: no GPU on this machine (nvidia-smi lists none): run it on the GPU machine" >&2
  exit 77
fi
budget="${GPU_PROBE_BUDGET_S:-300}"
if ! [[ "$budget" =~ ^[0-9]+$ ]] || [ "$budget" -lt 10 ] || [ "$budget" -gt 310 ]; then
  echo "gpu_probe: GPU_PROBE_BUDGET_S=$budget: give whole seconds from 10 to 310 (the run must end within 6 minutes)" >&2
  exit 2
fi
OUT="${OUT:-$root/out/probe}"
mkdir -p "$OUT"
# CUDA, cuDNN, cuBLAS and NCCL come from the machine's torch wheels (../shared/DEVICE.md); the frontend is
# header-only, compiled in.
SP="$(python3 -c 'import site; print(site.getsitepackages()[0])' 2> /dev/null || ls -d /opt/torch/.venv/lib/python3*/site-packages | head -1)"
export LD_LIBRARY_PATH="$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}:$(dirname "$probe")/../lib"
# The fp32 references must not run on TF32 tensor cores (the probe also deselects those engines).
export NVIDIA_TF32_OVERRIDE=0
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the shared machine (nothing here uses NCCL)
log="$OUT/probe.log"
{
  echo "gpu_probe: $probe, budget $budget s, $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
} > "$log" 2>&1
echo "gpu_probe: running $probe (budget $budget s, killed at $((budget + 40)) s); log in $log"
timeout --kill-after=10 $((budget + 40)) "$probe" --budget-s "$budget" "$@" >> "$log" 2>&1
rc=$?
# The tables (temporary name, then rename: no summary.md unless the probe printed one).
sed -n '/^## cuDNN fusion probe/,$p' "$log" > "$OUT/summary.md.tmp"
if [ -s "$OUT/summary.md.tmp" ]; then mv "$OUT/summary.md.tmp" "$OUT/summary.md"; else rm -f "$OUT/summary.md.tmp"; fi
if [ "$rc" -ne 0 ] || [ ! -s "$OUT/summary.md" ]; then
  echo "gpu_probe: the probe exited with $rc$([ "$rc" -eq 124 ] && echo ' (killed at the time limit)'); the last lines of its log:"
  tail -n 40 "$log"
fi
echo
grep -m1 '^cudnn_fusion_probe:' "$log" || true
[ -s "$OUT/summary.md" ] && cat "$OUT/summary.md"
exit "$rc"
