#!/usr/bin/env bash
# Memory benchmark of issue 15: activation recomputation and ZeRO-1, ours and PyTorch side by
# side in one run, ratios printed last.
#   GPU (one is enough), ResNet-50 and ResNet-152, bf16, SGD with momentum, synthetic data:
#     - batch 256 per --recompute none|bn|block: images/s (median of timed windows after warm-up)
#       and peak memory (the pool's high-water mark), against PyTorch eager and PyTorch with
#       torch.utils.checkpoint on every block (tests/worker/gpu/bench_torch.py --checkpoint block; peak =
#       max_memory_allocated);
#     - the largest batch per GPU that fits, per mode: predicted from the peaks at batch 128 and
#       256 (the pool's use is linear in the batch), then run; out of memory steps down by 7 %,
#       another error by 25 %, at most twice; its images/s.
#   ZeRO-1 with Adam, --zero 0 against --zero 1: on 2 GPUs when there are two (ResNet-50 bf16,
#   batch 256 per GPU), on one GPU as 2 ranks through the ring in host memory (--comm ring),
#   else on 2 CPU processes over the TCP ring (ResNet-50 at 32x32, batch 8): optimizer state and
#   fp32 weights per rank against the unsharded run's, peak memory, images/s.
#   Goals (issue 15): block recomputation's peak at batch 256 at most 0.5x PyTorch eager's, at
#   no more than 25 % speed cost against --recompute none; optimizer state per rank at most
#   1/world of the unsharded state plus one bucket.
# Every item has a time limit and the whole run a deadline (BENCH_DEADLINE, default 450 s from
# the start): what no longer fits is reported as skipped, and the table is always printed.
# Usage: scripts/bench_memory.sh      (on the GPU machine: scripts/gpu_pack.sh first, carry .gpu)
#   BENCH_MEM_DEPTHS="50 152"  BENCH_MEM_MODES="none bn block"
#   BENCH_MEM_MAXBATCH=0       leave out the largest-batch search
#   BENCH_MEM_CPU=1            only the ZeRO rows on the CPU ring (what runs without a GPU)
#   CPU_THREADS                threads per CPU rank (default: cores / 2)
#   GPU_BIN                    folder of our binaries (default .gpu/bin, else build/bin)
#   OUT                        where logs go (default out/memory); results.jsonl, summary.txt
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${GPU_BIN:-$root/.gpu/bin}"
for b in "$BIN" "$root/build/bin"; do
  if [ -x "$b/train_resnet" ] && [ -x "$b/launch" ]; then BIN="$b"; break; fi
done
OUT="${OUT:-$root/out/memory}"
log="$OUT/memory"
mkdir -p "$log"
results="$log/results.jsonl"
: > "$results"
PY=python3  # the GPU machine's, with torch (the CPU rows need only its json)
SP="$($PY -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)"
export LD_LIBRARY_PATH="$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}:$BIN/../lib"
# NVLink multicast stays off on the shared machine (../shared/DEVICE.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
[ "${BENCH_MEM_CPU:-0}" = 1 ] && ngpu=0
DEPTHS="${BENCH_MEM_DEPTHS:-50 152}"
MODES="${BENCH_MEM_MODES:-none bn block}"
BENCH_DEADLINE="${BENCH_DEADLINE:-$(( $(date +%s) + 450 ))}"
torch_py="$root/tests/worker/gpu/bench_torch.py"

tmo() {  # wanted seconds -> what the deadline allows (0: skip)
  local left=$(( BENCH_DEADLINE - $(date +%s) - 10 ))
  if [ "$left" -lt 20 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
row() { echo "$1" >> "$results"; }

# ours TAG SECONDS KEY=VALUE... -- LAUNCH-ARGS...: one run of launch + train_resnet; a JSON row
# from its metrics file (images/s: median of the logged windows but the first; the final
# record's peak and optimizer state) and its log (out of memory or another error).
ours() {
  local tag=$1 want=$2; shift 2
  local keys=()
  while [ "$1" != "--" ]; do keys+=("$1"); shift; done
  shift
  local t rc=skip t0; t=$(tmo "$want")
  t0=$(date +%s.%N)
  : > "$log/$tag.log"
  if [ "$t" -gt 0 ]; then
    timeout "$t" "$BIN/launch" --log_dir "$log/$tag.logs" --log_overwrite "$@" --metrics-file "$log/$tag.jsonl" \
      > "$log/$tag.log" 2>&1
    rc=$?
  fi
  $PY - "$log/$tag.jsonl" "$log/$tag.log" "$rc" "$tag" "$t0" "$(date +%s.%N)" "${keys[@]}" >> "$results" <<'PY'
import json, re, statistics, sys
path, logf, rc, tag, t0, t1, *keys = sys.argv[1:]
out = {"tag": tag, "wall_s": round(float(t1) - float(t0), 1)}
for kv in keys:
    k, v = kv.split("=", 1)
    out[k] = int(v) if v.isdigit() else v
try:
    rows = [json.loads(l) for l in open(path) if l.strip()]
except (OSError, ValueError):
    rows = []
text = open(logf, errors="replace").read()
win = [r["images_per_s"] for r in rows if not r.get("final") and r.get("images_per_s")][1:]
fin = next((r for r in rows if r.get("final")), {})
for k in ("peak_bytes", "peak_bytes_max_rank", "optimizer_state_bytes_max_rank", "fp32_weight_bytes"):
    if k in fin:
        out[k] = fin[k]
if win:
    out["images_per_s"] = statistics.median(win)
if rc == "skip":
    out["error"] = "skipped: out of time"
elif rc != "0":
    oom = re.search(r"out of memory", text, re.I)
    err = next((l for l in text.splitlines() if "error" in l.lower()), f"exit {rc}")
    out["error"] = "out of memory" if oom else ("timed out" if rc == "124" else err.strip()[:200])
print(json.dumps(out))
PY
}

torch_row() {  # depth checkpoint
  local t; t=$(tmo 120)
  if [ "$t" -eq 0 ]; then row "{\"tag\": \"torch_r$1_$2\", \"what\": \"torch\", \"depth\": $1, \"checkpoint\": \"$2\", \"error\": \"skipped: out of time\"}"; return; fi
  if timeout "$t" $PY "$torch_py" --depth "$1" --batch 256 --checkpoint "$2" \
      --steps-per-window 6 --windows 3 --warmup 3 --no-kernels > "$log/torch_r$1_$2.json" 2> "$log/torch_r$1_$2.err"; then
    grep '^{' "$log/torch_r$1_$2.json" | tail -1 >> "$results"
  else
    row "{\"tag\": \"torch_r$1_$2\", \"what\": \"torch\", \"depth\": $1, \"checkpoint\": \"$2\", \"error\": \"rc $?, see torch_r$1_$2.err\"}"
  fi
}

gpu_run() {  # depth mode batch steps tag-kind seconds
  local d=$1 m=$2 b=$3 steps=$4 kind=$5 want=$6
  ours "g_r${d}_${m}_b${b}" "$want" what=ours depth="$d" mode="$m" batch="$b" kind="$kind" -- \
    --gpus 0 "$BIN/train_resnet" --depth "$d" --precision bf16 --batch-size "$b" --optimizer sgd --lr 0.1 \
    --momentum 0.9 --weight-decay 1e-4 --data random --num-samples $((b * (steps + 2))) --max-steps "$steps" \
    --log-every $(( steps > 8 ? 4 : 2 )) --recompute "$m"
}

peak_of() {  # tag -> the run's peak bytes (empty when it failed)
  $PY - "$results" "$1" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("tag") == sys.argv[2] and "peak_bytes" in r and "error" not in r:
        print(r["peak_bytes"])
PY
}

# The largest batch: peaks at 128 and 256 give bytes per image; what fits in the GPU's memory
# but a margin (CUDA context, NCCL, the pool's 1 GiB chunks) is run; out of memory -> 7 % less.
max_batch() {  # depth mode
  local d=$1 m=$2 p256 p128 total b try
  p256=$(peak_of "g_r${d}_${m}_b256")
  [ -z "$p256" ] && return
  gpu_run "$d" "$m" 128 3 probe 60
  p128=$(peak_of "g_r${d}_${m}_b128")
  [ -z "$p128" ] && return
  total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | head -1)  # MiB
  b=$($PY -c "t=$total*2**20-6e9; s=($p256-$p128)/128; print(max(256, int((t-($p256-256*s))/s)//32*32))")
  for try in 1 2 3; do
    gpu_run "$d" "$m" "$b" 8 "max$try" 150
    case "$(tail -1 "$results")" in
      *'"error": "skipped'*) break ;;
      *'"error": "out of memory"'*) b=$(( b * 93 / 100 / 32 * 32 )) ;;
      *'"error"'*) b=$(( b * 3 / 4 / 32 * 32 )) ;;  # another limit (a tensor's size?): well below it
      *) break ;;
    esac
  done
}

zero_rows() {
  local z where
  if [ "$ngpu" -ge 2 ]; then
    where=gpu
    for z in 0 1; do
      ours "zero_gpu_z$z" 120 what=zero where=gpu zero="$z" -- --gpus 0,1 "$BIN/train_resnet" --depth 50 \
        --precision bf16 --batch-size 256 --optimizer adam --data random --num-samples 8192 --max-steps 14 \
        --log-every 4 --zero "$z"
    done
  elif [ "$ngpu" -eq 1 ]; then
    # Two ranks share the one GPU through the ring in host memory (NCCL refuses two ranks on one
    # device): the memory per rank is what 2 GPUs would hold; the speed is the staging's.
    where=gpu1
    for z in 0 1; do
      ours "zero_gpu1_z$z" 150 what=zero where=gpu1 zero="$z" -- --devices cpu --nproc_per_node 2 \
        "$BIN/train_resnet" --device gpu --comm ring --depth 50 --precision bf16 --batch-size 256 --optimizer adam \
        --data random --num-samples 8192 --max-steps 8 --log-every 2 --zero "$z"
    done
  else
    where=cpu
    local th="${CPU_THREADS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}"
    for z in 0 1; do
      OMP_NUM_THREADS=$th ours "zero_cpu_z$z" 150 what=zero where=cpu zero="$z" -- --devices cpu --nproc_per_node 2 \
        "$BIN/train_resnet" --depth 50 --image-size 32 --num-classes 1000 --batch-size 8 --optimizer adam \
        --data random --num-samples 512 --max-steps 9 --log-every 2 --threads "$th" --zero "$z"
    done
  fi
  grep -h "Memory: recompute\|Optimizer state\|Checksums\|Reduce-scatter\|All-reduce" "$log"/zero_${where}_z1.log "$log"/zero_${where}_z0.log \
    > "$log/zero_$where.lines" 2>/dev/null
}

echo "bench_memory: $ngpu GPU(s), binaries from $BIN, logs in $log"
if [ "$ngpu" -ge 1 ]; then
  nvidia-smi --query-gpu=name,memory.total --format=csv > "$log/gpus.csv" 2>&1
  for d in $DEPTHS; do
    for m in $MODES; do gpu_run "$d" "$m" 256 14 b256 90; done
    torch_row "$d" none
    torch_row "$d" block
  done
  zero_rows
  if [ "${BENCH_MEM_MAXBATCH:-1}" != 0 ]; then
    for d in $DEPTHS; do for m in $MODES; do max_batch "$d" "$m"; done; done
  fi
else
  zero_rows
fi

# --- The table
$PY - "$results" "$log" <<'PY' | tee "$log/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def get(pred):
    return next((r for r in rows if pred(r)), None)
def gb(r, k="peak_bytes"):
    return f"{r[k] / 1e9:.2f}" if r and k in r else ("ERR" if r else "-")
def ips(r):
    return f"{r['images_per_s']:.0f}" if r and "images_per_s" in r and "error" not in r else ("ERR" if r else "-")
goals = []
depths = sorted({r["depth"] for r in rows if r.get("what") == "ours"})
if depths:
    print("recompute, bf16, batch 256, 1 GPU (peak = allocator high-water mark; images/s = median of timed windows)")
    print(f"{'model':10s} {'mode':14s} {'images/s':>9s} {'vs none':>8s} {'peak GB':>8s} {'vs eager':>9s} {'largest batch':>14s} {'its images/s':>13s}")
    for d in depths:
        none = get(lambda r: r.get("what") == "ours" and r["depth"] == d and r["mode"] == "none" and r["kind"] == "b256")
        eager = get(lambda r: r.get("what") == "torch" and r["depth"] == d and r["checkpoint"] == "none")
        for m in ("none", "bn", "block"):
            o = get(lambda r: r.get("what") == "ours" and r["depth"] == d and r["mode"] == m and r["kind"] == "b256")
            if not o:
                continue
            big = [r for r in rows if r.get("what") == "ours" and r["depth"] == d and r["mode"] == m
                   and str(r.get("kind", "")).startswith("max") and "error" not in r]
            big = max(big, key=lambda r: r["batch"]) if big else None
            speed = (f"{o['images_per_s'] / none['images_per_s']:.2f}" if none and "images_per_s" in o and "images_per_s" in none
                     and "error" not in o and "error" not in none else "-")
            vs = f"{o['peak_bytes'] / eager['peak_bytes']:.2f}" if eager and "peak_bytes" in o and "peak_bytes" in eager else "-"
            print(f"ResNet-{d:<3d} {'ours ' + m:14s} {ips(o):>9s} {speed:>8s} {gb(o):>8s} {vs:>9s} "
                  f"{(str(big['batch']) if big else '-'):>14s} {ips(big):>13s}")
            if m == "block" and vs != "-" and speed != "-":
                goals.append(f"ResNet-{d} block: peak {vs}x eager's (goal <= 0.5: {'met' if float(vs) <= 0.5 else 'MISSED'}), "
                             f"speed {speed}x none's (goal >= 0.75: {'met' if float(speed) >= 0.75 else 'MISSED'})")
        for ck in ("none", "block"):
            t = get(lambda r: r.get("what") == "torch" and r["depth"] == d and r["checkpoint"] == ck)
            if t:
                vs = f"{t['peak_bytes'] / eager['peak_bytes']:.2f}" if eager and "peak_bytes" in t and "peak_bytes" in eager else "-"
                label = "torch eager" if ck == "none" else "torch ckpt"
                print(f"ResNet-{d:<3d} {label:14s} {ips(t):>9s} {'':>8s} {gb(t):>8s} {vs:>9s}")
z0 = get(lambda r: r.get("what") == "zero" and r["zero"] == 0)
z1 = get(lambda r: r.get("what") == "zero" and r["zero"] == 1)
if z0 or z1:
    where = (z0 or z1)["where"]
    print()
    print("ZeRO-1, Adam, ResNet-50, 2 ranks on " + {
        "gpu": "2 GPUs (bf16, batch 256 per GPU)",
        "gpu1": "one GPU, through the ring in host memory (--comm ring; bf16, batch 256 per rank; "
                "images/s are the staging's, not NCCL's)",
        "cpu": "the CPU ring (32x32, batch 8 per rank)"}[where])
    print(f"{'':9s} {'optimizer state per rank MB':>28s} {'fp32 weights per rank MB':>25s} {'peak GB (largest rank)':>23s} {'images/s':>9s}")
    for name, r in (("--zero 0", z0), ("--zero 1", z1)):
        st = f"{r['optimizer_state_bytes_max_rank'] / 1e6:.1f}" if r and "optimizer_state_bytes_max_rank" in r else "-"
        fw = f"{r['fp32_weight_bytes'] / 1e6:.1f}" if r and "fp32_weight_bytes" in r else "-"
        print(f"{name:9s} {st:>28s} {fw:>25s} {gb(r, 'peak_bytes_max_rank'):>23s} {ips(r):>9s}")
    if z0 and z1 and "optimizer_state_bytes_max_rank" in z0 and "optimizer_state_bytes_max_rank" in z1:
        bound = z0["optimizer_state_bytes_max_rank"] / 2 + 2 * 25 * 2**20  # 1/world + one 25 MiB bucket of each moment
        goals.append(f"ZeRO-1: optimizer state per rank {z1['optimizer_state_bytes_max_rank'] / z0['optimizer_state_bytes_max_rank']:.3f}x "
                     f"the unsharded (goal <= 1/2 + one bucket: {'met' if z1['optimizer_state_bytes_max_rank'] <= bound else 'MISSED'})")
        if "fp32_weight_bytes" in z0 and "fp32_weight_bytes" in z1:
            goals.append(f"ZeRO-1: fp32 weights per rank {z1['fp32_weight_bytes'] / z0['fp32_weight_bytes']:.3f}x the unsharded"
                         + (" (they are the working weights on the CPU: kept whole)" if where == "cpu" else ""))
        if "images_per_s" in z0 and "images_per_s" in z1:
            goals.append(f"ZeRO-1: speed {z1['images_per_s'] / z0['images_per_s']:.3f}x the unsharded run's")
    try:
        print("".join("  " + l for l in open(f"{sys.argv[2]}/zero_{where}.lines")))
    except OSError:
        pass
if goals:
    print()
    print("goals:")
    for g in goals:
        print("  " + g)
for r in rows:
    if "error" in r and not str(r.get("kind", "")).startswith("max"):
        print("  error:", json.dumps(r))
for r in rows:
    if "error" in r and str(r.get("kind", "")).startswith("max"):
        print(f"  largest batch search: ResNet-{r['depth']} {r['mode']} at batch {r['batch']}: {r['error']}")
PY
