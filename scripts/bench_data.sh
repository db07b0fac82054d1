#!/usr/bin/env bash
# The input pipeline's benchmark (issue 11), ours and the competitors side by side in one run:
#   loader alone, images/s delivered into the backend's memory (device memory where a GPU is
#   visible), 224x224, batch 256, the training transform (RandomResizedCrop + flip + normalize):
#     ours, CPU back end (data_bench --loader cpu)   vs  torch DataLoader + ImageFolder + PIL,
#       same transforms, as many workers as our decode threads (every entry of THREADS)
#     ours, GPU back end (nvJPEG + our kernel)       vs  the DataLoader with the most workers,
#       and torchvision.io.decode_jpeg(device='cuda') + antialiased resize
#   end to end (GPU only): ResNet-50 batch 256 (--precision auto) on 1 GPU, on the JPEGs (listed
#     over and over so that the run is one epoch, as 500 steps of ImageNet are) vs --data random,
#     the same with the GPU loader's CPU share off (WORKER_NVJPEG_CPU_SHARE=0), with an epoch
#     every few dozen steps (the files listed 8 times), and with the JPEG engine decoding only each
#     crop's region (WORKER_NVJPEG_ROI=1): each row the whole run's images/s, the
#     median of its steady windows and the time a step waited for its batch (on the host: once the
#     step is a CUDA graph the host runs ahead of the GPU and the GPU loader decodes a batch only when
#     the GPU has copied out the one two before, so a wait near the step's time means the GPU sets
#     the pace, not the loader).
# The JPEG set is made in a temporary folder: BENCH_IMAGES ImageNet-like files (500x375 and
# similar, quality 87, ~110 KB), or, with BENCH_PHOTO_DIR, the real JPEGs of that folder copied
# round-robin up to BENCH_IMAGES files (e.g. the 1,000 photos of github.com/EliSchwartz/
# imagenet-sample-images, one per ImageNet class, 109 KB mean). Prints a table with the ratios last; the CPU loader's rows also
# give the CPU time per image of each side (all its threads and processes), which other load on a
# shared machine does not dilute as it does images/s (the ratio there: theirs / ours).
#   THREADS="1 2"        decode threads / DataLoader workers (default: 1 and all cores)
#   BENCH_IMAGES=2048    BENCH_SECONDS=12 (per loader row)   BENCH_E2E_STEPS=500   BENCH_PHOTO_DIR=
#   BENCH_LOADERS=0      the end-to-end rows only (no loader-alone rows)
#   OUT                  the end-to-end runs' logs go to $OUT/data/e2e_*.log (default out/gpu)
#   BUILD_DIR / GPU_BIN  where data_bench, train_resnet and launch are (default build/bin, .gpu/bin)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${GPU_BIN:-$root/.gpu/bin}"
[ -x "$BIN/data_bench" ] || BIN="${BUILD_DIR:-$root/build}/bin"
[ -x "$BIN/data_bench" ] || { echo "bench_data: $BIN/data_bench is missing (cmake --build build --target data_bench)" >&2; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] && "$PY" -c 'import torch' 2>/dev/null || PY=python3
cores="$(nproc)"
THREADS="${THREADS:-$( [ "$cores" -gt 1 ] && echo "1 $cores" || echo 1 )}"
N="${BENCH_IMAGES:-2048}"
SECS="${BENCH_SECONDS:-12}"
gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then gpu=1; fi
if [ "$gpu" = 1 ]; then
  SP="$($PY -c 'import site; print(site.getsitepackages()[0])')"
  export LD_LIBRARY_PATH="$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}:$BIN/../lib"
  export NCCL_NVLS_ENABLE=0
fi
dev=cpu; tdev=cpu
[ "$gpu" = 1 ] && dev=gpu && tdev=cuda
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
photos=()
[ -n "${BENCH_PHOTO_DIR:-}" ] && photos=(--photos "$BENCH_PHOTO_DIR")
echo "bench_data: making $N ${BENCH_PHOTO_DIR:+real }JPEGs${BENCH_PHOTO_DIR:+ from $BENCH_PHOTO_DIR} in $tmp ..." >&2
info="$("$PY" "$root/tests/worker/data/make_dataset.py" "$tmp/ds" --imagenet "$N" "${photos[@]}")" || exit 1
echo "bench_data: $info" >&2
rows=()
field() { "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); print(d.get(sys.argv[2], d.get("error", "?")))' "$1" "$2" 2>/dev/null || echo "?"; }
ratio() { "$PY" -c 'import sys; a,b=map(float,sys.argv[1:]); print(f"{a/b:.2f}x" if b > 0 else "n/a")' "$1" "$2" 2>/dev/null || echo "n/a"; }
last_dl=0; last_t=1
[ "${BENCH_LOADERS:-1}" = 0 ] && THREADS=""
for t in $THREADS; do
  ours="$("$BIN/data_bench" "$tmp/ds" cpu "$dev" 256 "$t" 224 "$SECS" 2>&1 | tail -1)"
  theirs="$("$PY" "$root/tests/worker/data/bench_torch_loader.py" dataloader --data "$tmp/ds" --workers "$t" \
            --seconds "$SECS" --device "$tdev" 2>&1 | tail -1)"
  o="$(field "$ours" images_per_s)"; p="$(field "$theirs" images_per_s)"
  rows+=("$(printf '%-44s %10s %10s %8s' "CPU back end vs DataLoader+PIL, $t thread(s)" "$o" "$p" "$(ratio "$o" "$p")")")
  rows+=("$(printf '%-44s %10s %10s %8s' "  per thread" "$("$PY" -c "print(round($o/$t,1))" 2>/dev/null)" "$("$PY" -c "print(round($p/$t,1))" 2>/dev/null)" "")")
  oc="$(field "$ours" cpu_ms_per_image)"; pc="$(field "$theirs" cpu_ms_per_image)"
  rows+=("$(printf '%-44s %10s %10s %8s' "  CPU ms per image (all processes)" "$oc" "$pc" "$(ratio "$pc" "$oc")")")
  last_dl="$p"; last_t="$t"
done
if [ "$gpu" = 1 ] && [ "${BENCH_LOADERS:-1}" != 0 ]; then
  ours="$("$BIN/data_bench" "$tmp/ds" gpu gpu 256 "$last_t" 224 "$SECS" 2>&1 | tail -1)"
  nv="$("$PY" "$root/tests/worker/data/bench_torch_loader.py" nvjpeg --data "$tmp/ds" --seconds "$SECS" --device cuda 2>&1 | tail -1)"
  o="$(field "$ours" images_per_s)"; v="$(field "$nv" images_per_s)"
  rows+=("$(printf '%-44s %10s %10s %8s' "GPU back end vs DataLoader+PIL, $last_t workers" "$o" "$last_dl" "$(ratio "$o" "$last_dl")")")
  rows+=("$(printf '%-44s %10s %10s %8s' "GPU back end vs torchvision decode_jpeg(cuda)" "$o" "$v" "$(ratio "$o" "$v")")")
  echo "bench_data: GPU back end: $(field "$ours" describe)" >&2
fi
if [ "$gpu" = 1 ]; then
  steps="${BENCH_E2E_STEPS:-500}"
  e2e_log="${OUT:-$root/out/gpu}/data"
  mkdir -p "$e2e_log"
  # e2e NAME ARGS...: one run, its log kept as $e2e_log/e2e_NAME.log; prints "THROUGHPUT STEADY WAIT":
  # the whole run's images/s (first step excluded), the median of its 25-step windows after the
  # first two (the engines' timing and the graph's capture happen there), and the mean time a
  # step of those windows waited for its batch (ms).
  e2e() {
    local name="$1"; shift
    timeout 300 "$BIN/launch" --gpus 0 --log_dir "$tmp/log" "$BIN/train_resnet" --depth 50 --num-classes 1000 --batch-size 256 --optimizer sgd \
      --lr 0.1 --max-steps "$steps" --epochs 1000 --log-every 25 "$@" > "$e2e_log/e2e_$name.log" 2>&1
    grep -E '^(Data|Precision):' "$e2e_log/e2e_$name.log" >&2
    "$PY" - "$e2e_log/e2e_$name.log" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
t = re.findall(r"Throughput: ([0-9.]+)", text)
w = [(float(a), float(b)) for a, b in re.findall(r"images/s: ([0-9.]+), data wait: ([0-9.]+) ms/step", text)][2:]
print(t[-1] if t else "?", f"{statistics.median(a for a, _ in w):.1f}" if w else "?",
      f"{statistics.mean(b for _, b in w):.2f}" if w else "?")
PY
  }
  # The folder listed over and over in a list file, so that the run is one epoch, as 500 steps of
  # ImageNet (5,004 steps per epoch) are: each epoch's first batch cannot be decoded before the
  # epoch starts, which a run over the bare folder (10 steps per epoch at 2,560 files) would pay
  # every 10 steps. The last row lists it 8 times (an epoch every 8 x files / 256 steps) to show
  # what those starts cost.
  list_of() {  # list_of COPIES OUT
    "$PY" - "$tmp/ds" "$1" "$2" <<'PY'
import os, sys
root, copies, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
train = os.path.join(root, "train")
classes = sorted(os.listdir(train))
rows = [f"{os.path.join(train, c, f)} {i}" for i, c in enumerate(classes) for f in sorted(os.listdir(os.path.join(train, c)))]
open(out, "w").write("\n".join(rows * copies) + "\n")
PY
  }
  files="$(find "$tmp/ds/train" -type f | wc -l)"
  list_of $(( (steps + 1) * 256 / files + 1 )) "$tmp/e2e.txt"
  list_of 8 "$tmp/e2e8.txt"
  read -r real real_s real_w <<< "$(e2e jpegs --data "$tmp/e2e.txt")"
  read -r synth synth_s synth_w <<< "$(e2e random --data random --num-samples 100000)"
  read -r nvonly nvonly_s nvonly_w <<< "$(WORKER_NVJPEG_CPU_SHARE=0 e2e nvjpeg_alone --data "$tmp/e2e.txt")"
  read -r short short_s short_w <<< "$(e2e jpegs_short_epochs --data "$tmp/e2e8.txt")"
  read -r roi roi_s roi_w <<< "$(WORKER_NVJPEG_ROI=1 e2e jpegs_roi --data "$tmp/e2e.txt")"
  rows+=("$(printf '%-44s %10s %10s %8s' "ResNet-50 b256 1 GPU, auto: JPEGs vs random" "${real:-?}" "${synth:-?}" "$(ratio "${real:-0}" "${synth:-0}")")")
  rows+=("$(printf '%-44s %10s %10s %8s' "  steady windows (median, after the first two)" "${real_s:-?}" "${synth_s:-?}" "$(ratio "${real_s:-0}" "${synth_s:-0}")")")
  rows+=("$(printf '%-44s %10s %10s' "  data wait, ms/step (those windows)" "${real_w:-?}" "${synth_w:-?}")")
  # variant LABEL WHOLE STEADY WAIT: a variant's whole-run row and its steady windows' row against random data.
  variant() {
    rows+=("$(printf '%-44s %10s %10s %8s' "  $1" "${2:-?}" "${synth:-?}" "$(ratio "${2:-0}" "${synth:-0}")")")
    rows+=("$(printf '%-44s %10s %10s %8s' "  steady windows; data wait $4 ms/step" "${3:-?}" "${synth_s:-?}" "$(ratio "${3:-0}" "${synth_s:-0}")")")
  }
  variant "the same, nvJPEG alone (CPU share 0)" "$nvonly" "$nvonly_s" "$nvonly_w"
  variant "an epoch every $(( files * 8 / 256 )) steps (the files x 8)" "$short" "$short_s" "$short_w"
  variant "regions of interest (WORKER_NVJPEG_ROI=1)" "$roi" "$roi_s" "$roi_w"
fi
echo
printf '%-44s %10s %10s %8s\n' "images/s (median of 1 s windows)" "ours" "theirs" "ratio"
for r in "${rows[@]}"; do echo "$r"; done
