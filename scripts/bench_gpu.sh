#!/usr/bin/env bash
# Benchmark on the GPU machine: our trainer vs PyTorch eager, same model, batch and precision.
#   ResNet-50 bf16 batch 256 (the goal), ResNet-18 bf16 batch 256, ResNet-50 fp32 batch 128
#   (TF32 convolutions on both sides: PyTorch's default), 1 GPU; ResNet-50 bf16 on 2 GPUs
#   (ours through `launch --gpus 0,1 train_resnet`, PyTorch through torchrun + DDP).
# Images/s are medians of timed windows after warm-up; peak memory is what each framework's
# allocator handed out (ours: the pool's high-water mark; torch: max_memory_allocated); time to
# the first step counts from the command's start (BENCH_T0).
# Usage: scripts/bench_gpu.sh   (GPU_BIN: folder of our binaries; OUT: where logs go;
#        BENCH_QUICK=1: ResNet-50 bf16 only)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${GPU_BIN:-$root/.gpu/bin}"
[ -x "$BIN/gpu_model_driver" ] || BIN="$root/build-gpu/bin"
OUT="${OUT:-$root/out/gpu}"
mkdir -p "$OUT/bench"
log="$OUT/bench"
SP="$(python3 -c 'import site; print(site.getsitepackages()[0])')"
# Last: libraries carried beside the binaries (libgomp, libfmt) only where the machine lacks them.
export LD_LIBRARY_PATH="$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}:$BIN/../lib"
# NVLink multicast must stay off on the shared machine (../shared/DEVICE.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
torch_py="$root/tests/worker/gpu/bench_torch.py"
results="$log/results.jsonl"
: > "$results"

now() { date +%s.%N; }

ours1() {  # depth precision batch [env...]
  local d=$1 p=$2 b=$3; shift 3
  env "$@" BENCH_T0="$(now)" timeout 300 "$BIN/gpu_model_driver" bench --depth "$d" --precision "$p" \
    --batch "$b" > "$log/ours_r${d}_${p}_b${b}.json" 2> "$log/ours_r${d}_${p}_b${b}.err"
  local rc=$?
  if [ $rc -eq 0 ]; then sed 's/^{/{"gpus": 1, /' "$log/ours_r${d}_${p}_b${b}.json" >> "$results"
  else echo "{\"what\": \"ours\", \"gpus\": 1, \"depth\": $d, \"precision\": \"$p\", \"error\": \"rc $rc, see ours_r${d}_${p}_b${b}.err\"}" >> "$results"; fi
}

torch1() {  # depth precision batch
  local d=$1 p=$2 b=$3
  BENCH_T0="$(now)" timeout 300 python3 "$torch_py" --depth "$d" --precision "$p" --batch "$b" \
    > "$log/torch_r${d}_${p}_b${b}.json" 2> "$log/torch_r${d}_${p}_b${b}.err"
  local rc=$?
  if [ $rc -eq 0 ]; then tail -1 "$log/torch_r${d}_${p}_b${b}.json" >> "$results"
  else echo "{\"what\": \"torch\", \"gpus\": 1, \"depth\": $d, \"precision\": \"$p\", \"error\": \"rc $rc\"}" >> "$results"; fi
}

# Ours on N GPUs through the launcher and the real trainer: images/s from its metrics file
# (windows of 10 steps, the first window dropped as warm-up).
oursN() {  # gpus(list) depth precision batch
  local gpus=$1 d=$2 p=$3 b=$4 n
  n=$(( $(tr -cd ',' <<< "$gpus" | wc -c) + 1 ))
  local tag="launch_g${n}_r${d}_${p}_b${b}" t0
  t0="$(now)"
  timeout 300 "$BIN/launch" --gpus "$gpus" "$BIN/train_resnet" --depth "$d" --precision "$p" \
    --batch-size "$b" --optimizer sgd --lr 0.1 --momentum 0.9 --weight-decay 1e-4 --data random \
    --num-samples 100000 --max-steps 61 --log-every 10 --metrics-file "$log/$tag.metrics.jsonl" \
    > "$log/$tag.log" 2>&1
  local rc=$? t1
  t1="$(now)"
  python3 - "$log/$tag.metrics.jsonl" "$rc" "$n" "$d" "$p" "$b" "$t0" "$t1" >> "$results" <<'PY'
import json, statistics, sys
path, rc, n, d, p, b, t0, t1 = sys.argv[1:]
try:
    rows = [json.loads(l) for l in open(path) if l.strip()]
except OSError:
    rows = []
ips = [r["images_per_s"] for r in rows if r.get("images_per_s")][1:]
out = {"what": "ours-launch", "gpus": int(n), "depth": int(d), "precision": p, "batch": int(b),
       "wall_s": round(float(t1) - float(t0), 1)}
if rc != "0" or not ips:
    out["error"] = f"rc {rc}, {len(ips)} timed windows"
else:
    out["images_per_s"] = statistics.median(ips)
print(json.dumps(out))
PY
}

torchN() {  # gpus depth precision batch
  local n=$1 d=$2 p=$3 b=$4
  BENCH_T0="$(now)" timeout 300 torchrun --standalone --nproc_per_node "$n" "$torch_py" --depth "$d" \
    --precision "$p" --batch "$b" > "$log/torchrun_g${n}_r${d}_${p}.json" 2> "$log/torchrun_g${n}_r${d}_${p}.err"
  local rc=$?
  if [ $rc -eq 0 ]; then grep '^{' "$log/torchrun_g${n}_r${d}_${p}.json" | tail -1 >> "$results"
  else echo "{\"what\": \"torch\", \"gpus\": $n, \"depth\": $d, \"precision\": \"$p\", \"error\": \"rc $rc\"}" >> "$results"; fi
}

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv > "$log/gpus.csv" 2>&1

ours1 50 bf16 256
torch1 50 bf16 256
ours1 50 bf16 256 WORKER_CUDNN_SEARCH=find
if [ "${BENCH_QUICK:-0}" != 1 ]; then
  ours1 18 bf16 256
  torch1 18 bf16 256
  ours1 50 fp32 128 WORKER_GPU_TF32=1
  torch1 50 fp32 128
fi
if [ -x "$BIN/launch" ] && [ -x "$BIN/train_resnet" ]; then
  oursN 0 50 bf16 256
  if [ "$ngpu" -ge 2 ]; then oursN 0,1 50 bf16 256; fi
fi
if [ "$ngpu" -ge 2 ]; then torchN 2 50 bf16 256; fi

# --- The table
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def find(what, gpus, depth, prec, pred=lambda r: True):
    for r in rows:
        if r.get("what") == what and r.get("gpus") == gpus and r.get("depth") == depth and r.get("precision") == prec and pred(r):
            return r
    return None
print("bench (images/s, median of timed windows; peak = allocator high-water mark; first = s from command start to first finished step)")
print(f"{'config':34s} {'ours':>9s} {'torch':>9s} {'ratio':>6s} {'peak ours/torch GB':>19s} {'first ours/torch s':>19s}")
def fmt(r, k, f="{:.0f}"):
    return f.format(r[k]) if r and k in r else ("ERR" if r and "error" in r else "-")
for (d, p, label) in [(50, "bf16", "ResNet-50 bf16 b256 1 GPU"), (18, "bf16", "ResNet-18 bf16 b256 1 GPU"),
                      (50, "fp32", "ResNet-50 fp32/TF32 b128 1 GPU")]:
    o = find("ours", 1, d, p, lambda r: "timed search" not in r.get("backend", ""))
    t = find("torch", 1, d, p)
    if not o and not t:
        continue
    ratio = f"{o['images_per_s'] / t['images_per_s']:.2f}" if o and t and "images_per_s" in o and "images_per_s" in t else "-"
    peak = f"{o['peak_bytes']/1e9:.1f} / {t['peak_bytes']/1e9:.1f}" if o and t and "peak_bytes" in o and "peak_bytes" in t else "-"
    first = f"{o['first_step_s']:.1f} / {t['first_step_s']:.1f}" if o and t and "first_step_s" in o and "first_step_s" in t else "-"
    print(f"{label:34s} {fmt(o, 'images_per_s'):>9s} {fmt(t, 'images_per_s'):>9s} {ratio:>6s} {peak:>19s} {first:>19s}")
h = find("ours", 1, 50, "bf16", lambda r: "timed search" in r.get("backend", ""))
if h:
    print(f"{'  same, cuDNN timed search':34s} {fmt(h, 'images_per_s'):>9s} {'':>9s} {'':>6s} {(f"{h['peak_bytes']/1e9:.1f}" if 'peak_bytes' in h else '-'):>19s} {fmt(h, 'first_step_s', '{:.1f}'):>19s}")
for r in rows:
    if r.get("what") == "ours" and "workspace_bytes" in r:
        print(f"  ours r{r['depth']} {r['precision']} ({r['backend'].split('conv algorithms by ')[-1].rstrip(')')}): "
              f"cuDNN workspace {r['workspace_bytes']/2**20:.0f} MiB, pool reserved {r['reserved_bytes']/1e9:.1f} GB, "
              f"algorithm choice {r['algo_search_s']:.1f} s, loss {r['first_loss']:.3f} -> {r['last_loss']:.3f}")
l1, l2 = find("ours-launch", 1, 50, "bf16"), find("ours-launch", 2, 50, "bf16")
t2 = find("torch", 2, 50, "bf16")
t1 = find("torch", 1, 50, "bf16")
if l1:
    print(f"{'ResNet-50 bf16 launch+trainer 1 GPU':34s} {fmt(l1, 'images_per_s'):>9s} {fmt(t1, 'images_per_s'):>9s}")
if l2 or t2:
    ratio = f"{l2['images_per_s'] / t2['images_per_s']:.2f}" if l2 and t2 and "images_per_s" in l2 and "images_per_s" in t2 else "-"
    print(f"{'ResNet-50 bf16 b256/GPU 2 GPUs':34s} {fmt(l2, 'images_per_s'):>9s} {fmt(t2, 'images_per_s'):>9s} {ratio:>6s}")
    if l1 and l2 and "images_per_s" in l1 and "images_per_s" in l2:
        print(f"  scaling ours: {l2['images_per_s'] / (2 * l1['images_per_s']) * 100:.1f} %", end="")
    if t1 and t2 and "images_per_s" in t1 and "images_per_s" in t2:
        print(f"   torch: {t2['images_per_s'] / (2 * t1['images_per_s']) * 100:.1f} %", end="")
    print()
for r in rows:
    if "error" in r:
        print("  error:", json.dumps(r))
PY
