#!/usr/bin/env bash
# TensorBoard for train_resnet's --tensorboard DIR. The tensorboard package is not Debian's: it
# lives in .venv/tools (scripts/setup.sh test makes it; on first use this script does, through
# `scripts/setup.sh tensorboard`). Arguments go to tensorboard:
#   scripts/tensorboard.sh --logdir tb            then open http://localhost:6006
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tb="$root/.venv/tools/bin/tensorboard"
if [ ! -x "$tb" ]; then
  echo "tensorboard: not installed yet; installing it into .venv/tools (scripts/setup.sh tensorboard)" >&2
  "$root/scripts/setup.sh" tensorboard
fi
exec "$tb" "$@"
