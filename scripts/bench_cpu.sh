#!/usr/bin/env bash
# CPU training throughput of train_resnet beside PyTorch's (Debian python3-torch), same model,
# batch, optimizer (Adam) and thread count, in one run; prints images/s and the ratio ours/PyTorch.
#   ResNet-18 (width 64) at 32x32 and ResNet-50 at 224x224; 1 process, and 2 processes
#   (ours: launch --devices cpu; PyTorch: DDP over gloo), the threads split between them.
# Environment: BUILD_DIR (default build), THREADS (default: all cores), STEPS18 / STEPS50 (timed
# steps + 1 warm-up step), BATCH18 / BATCH50 (per process), PYTHON (default /usr/bin/python3).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
train="$build/bin/train_resnet"
launch="$build/bin/launch"
py="${PYTHON:-/usr/bin/python3}"
threads="${THREADS:-$(nproc)}"
half=$(( threads / 2 > 0 ? threads / 2 : 1 ))
[ -x "$train" ] || { echo "bench_cpu: $train not built (scripts/setup.sh)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/torch_bench.py" <<'PYEOF'
import os, sys, time
import torch, torchvision
import torch.distributed as dist
depth, size, classes, batch, steps, threads = map(int, sys.argv[1:7])
world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    dist.init_process_group("gloo")
torch.set_num_threads(threads)
torch.manual_seed(0)
model = getattr(torchvision.models, f"resnet{depth}")(num_classes=classes)
if world > 1:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(batch, 3, size, size)
y = torch.randint(0, classes, (batch,))
loss_fn = torch.nn.CrossEntropyLoss()
for i in range(steps + 1):
    if i == 1:
        t0 = time.perf_counter()  # the first step is warm-up
    opt.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    opt.step()
dt = time.perf_counter() - t0
if world == 1 or dist.get_rank() == 0:
    print(f"THROUGHPUT {steps * batch * world / dt:.2f}")
PYEOF

ours() {  # nproc depth size classes batch steps threads
  local n=$1 args=(--depth "$2" --image-size "$3" --num-classes "$4" --batch-size "$5" --max-steps $(( $6 + 1 ))
                   --num-samples 100000 --log-every 1000000 --threads "$7" --device cpu)
  local out
  if [ "$n" = 1 ]; then
    out="$("$train" "${args[@]}" 2>&1)" || { echo "$out" >&2; return 1; }
  else
    [ -x "$launch" ] || { echo "n/a"; return 0; }
    out="$(OMP_NUM_THREADS="$7" "$launch" --devices cpu --nproc_per_node "$n" --log_dir "$tmp/log" "$train" "${args[@]}" 2>&1)" \
      || { echo "$out" >&2; return 1; }
  fi
  echo "$out" | sed -n 's/^.*Throughput: \([0-9.]*\) images\/s.*$/\1/p' | tail -1
}

theirs() {  # nproc depth size classes batch steps threads
  local out
  if [ "$1" = 1 ]; then
    out="$(OMP_NUM_THREADS="$7" "$py" "$tmp/torch_bench.py" "$2" "$3" "$4" "$5" "$6" "$7" 2>&1)" || { echo "$out" >&2; return 1; }
  else
    local port
    port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    local pids=() r
    for r in $(seq 0 $(( $1 - 1 ))); do
      MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" RANK=$r WORLD_SIZE="$1" OMP_NUM_THREADS="$7" \
        "$py" "$tmp/torch_bench.py" "$2" "$3" "$4" "$5" "$6" "$7" >"$tmp/torch.$r" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || { cat "$tmp"/torch.* >&2; return 1; }; done
    out="$(cat "$tmp/torch.0")"
  fi
  echo "$out" | sed -n 's/^THROUGHPUT \([0-9.]*\)$/\1/p'
}

printf "%-34s %5s %8s %12s %12s %7s\n" "model" "procs" "threads" "ours img/s" "torch img/s" "ratio"
row() {  # label nproc depth size classes batch steps threads
  local a b ratio
  a="$(ours "$2" "$3" "$4" "$5" "$6" "$7" "$8")"
  b="$(theirs "$2" "$3" "$4" "$5" "$6" "$7" "$8")"
  ratio="$(awk -v a="$a" -v b="$b" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }')"
  printf "%-34s %5s %8s %12s %12s %7s\n" "$1" "$2" "$8/proc" "${a:-n/a}" "${b:-n/a}" "$ratio"
}
b18="${BATCH18:-32}"; s18="${STEPS18:-10}"; b50="${BATCH50:-4}"; s50="${STEPS50:-3}"
row "ResNet-18 w64 32x32 batch $b18"  1 18 32 10 "$b18" "$s18" "$threads"
row "ResNet-18 w64 32x32 batch $b18"  2 18 32 10 "$b18" "$s18" "$half"
row "ResNet-50 224x224 batch $b50"    1 50 224 1000 "$b50" "$s50" "$threads"
row "ResNet-50 224x224 batch $b50"    2 50 224 1000 "$b50" "$s50" "$half"
echo "(images/s of all processes together, Adam, first step excluded; $(nproc) cores, $(date -u +%F))"
