#!/usr/bin/env bash
# --loader auto against both loaders, side by side in one run (issue 24 item 5), end to end on
# the GPU: launch --gpus 0 train_resnet with --loader auto, cpu and gpu on
#   small: BENCH_SMALL (default 20,000) 32x32 JPEGs in 10 classes, --recipe small-images,
#          batch 512 (CIFAR's size, where the CPU loader is expected to win);
#   photos: BENCH_PHOTOS (default 1,024) ImageNet-like JPEGs (500x375 and similar, ~110 KB;
#          tests/worker/data/make_dataset.py --imagenet; with BENCH_PHOTO_DIR, the real JPEGs of
#          that folder copied round-robin), ResNet-50 at 224, batch 256 (nvJPEG's).
# Each run is BENCH_STEPS (default 100) steps; images/s is train_resnet's Throughput line (first
# step excluded). Prints, per data set, what auto chose (its Data line) and auto's rate over the
# faster of the two: 1.00 means auto picked the faster one.
# Needs a GPU and train_resnet built with nvJPEG; binaries from .gpu/bin (scripts/gpu_pack.sh)
# or build/bin. python3 with Pillow makes the images.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${GPU_BIN:-$root/.gpu/bin}"
[ -x "$BIN/train_resnet" ] || BIN="${BUILD_DIR:-$root/build}/bin"
[ -x "$BIN/train_resnet" ] || { echo "bench_loader: no train_resnet in $BIN (build it, or scripts/gpu_pack.sh)" >&2; exit 1; }
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "bench_loader: no GPU visible: --loader auto weighs the loaders only on the GPU backend" >&2
  exit 77
fi
SP="$(python3 -c 'import site; print(site.getsitepackages()[0])')"
export LD_LIBRARY_PATH="$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}:$BIN/../lib"
export NCCL_NVLS_ENABLE=0
STEPS="${BENCH_STEPS:-100}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "bench_loader: making ${BENCH_SMALL:-20000} 32x32 JPEGs ..." >&2
python3 - "$tmp/small" "${BENCH_SMALL:-20000}" <<'EOF' || exit 1
import os, sys, random
from PIL import Image
out, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(3)
for c in range(10):
    d = os.path.join(out, "train", f"c{c}")
    os.makedirs(d)
    for i in range(n // 10):
        img = Image.frombytes("RGB", (32, 32), rng.randbytes(3072))
        img.save(os.path.join(d, f"{i}.jpg"), quality=90)
EOF
echo "bench_loader: making ${BENCH_PHOTOS:-1024} ImageNet-like JPEGs ..." >&2
photos=()
[ -n "${BENCH_PHOTO_DIR:-}" ] && photos=(--photos "$BENCH_PHOTO_DIR")
python3 "$root/tests/worker/data/make_dataset.py" "$tmp/photos" --imagenet "${BENCH_PHOTOS:-1024}" "${photos[@]}" >/dev/null || exit 1

declare -A args=(
  [small]="--recipe small-images --batch-size 512 --epochs 100"
  [photos]="--depth 50 --image-size 224 --batch-size 256 --epochs 100 --optimizer sgd --lr 0.1"
)
rows=()
for set in small photos; do
  declare -A ips=()
  for loader in auto cpu gpu; do
    log="$tmp/$set.$loader.log"
    # shellcheck disable=SC2086
    timeout 300 "$BIN/launch" --gpus 0 --log_dir "$tmp/log.$set.$loader" "$BIN/train_resnet" --data "$tmp/$set" ${args[$set]} --max-steps "$STEPS" \
      --log-every 50 --loader "$loader" >"$log" 2>&1
    ips[$loader]="$(sed -n 's/^Throughput: \([0-9.]*\) images\/s.*/\1/p' "$log" | tail -1)"
    echo "bench_loader: $set --loader $loader: ${ips[$loader]:-failed} images/s" >&2
    [ -n "${ips[$loader]}" ] || tail -3 "$log" >&2
    if [ "$loader" = auto ]; then
      chose="$(grep -o '[A-Z]* decode ([^)]*)' "$log" | head -1)"
      why="$(grep -o '(--loader auto: [^)]*)' "$log" | head -1)"
    fi
  done
  ratio="$(python3 -c 'import sys; a,c,g=(float(x or 0) for x in sys.argv[1:]); b=max(c,g); print(f"{a/b:.2f}" if b else "n/a")' \
           "${ips[auto]}" "${ips[cpu]}" "${ips[gpu]}")"
  rows+=("$(printf '%-7s %10s %10s %10s %12s   auto chose: %s %s' "$set" "${ips[auto]:-?}" "${ips[cpu]:-?}" "${ips[gpu]:-?}" "$ratio" "$chose" "$why")")
  unset ips
done
echo
echo "images/s, $STEPS steps, one GPU (train_resnet's Throughput line)"
printf '%-7s %10s %10s %10s %12s\n' "data" "auto" "cpu" "gpu" "auto/faster"
for r in "${rows[@]}"; do echo "$r"; done
