#!/usr/bin/env bash
# Installs what running needs, builds what the main job runs (`scripts/setup.sh run`: the
# targets launch and train_resnet; the CUDA backend only where a GPU is visible), then runs it:
# data-parallel ResNet training with one worker per GPU (`launch --gpus <all visible>
# train_resnet`), or, on a machine without a GPU, two CPU workers on a small synthetic problem.
# Extra arguments go to train_resnet.
#   BUILD_DIR=DIR   build folder (default: build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh" run
bin="${BUILD_DIR:-$root/build}/bin"
launch="$bin/launch"

if [ ! -x "$bin/train_resnet" ]; then
  echo "run: $bin/train_resnet was not built (the worker is not in this tree yet, or its build" \
       "failed); nothing to run" >&2
  exit 1
fi

# The launcher's own device detection decides (CUDA_VISIBLE_DEVICES, else /dev/nvidiaN): its
# dry run lists one rank per visible GPU.
gpus="$("$launch" --dry-run --log_dir "${TMPDIR:-/tmp}" true | sed -n 's/^rank [0-9]* (gpu:\([0-9]*\)).*/\1/p' | paste -sd, -)"
cd "$root"
if [ -n "$gpus" ]; then
  echo "run: launch --gpus $gpus train_resnet $*"
  exec "$launch" --gpus "$gpus" "$bin/train_resnet" "$@"
fi
echo "run: no GPU visible: two CPU workers on a small synthetic problem"
exec "$launch" --devices cpu --nproc_per_node 2 "$bin/train_resnet" \
  --depth 18 --width 16 --image-size 32 --data learnable --num-classes 10 "$@"
