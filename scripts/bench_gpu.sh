#!/usr/bin/env bash
# Benchmark on the GPU machine: our trainer vs PyTorch eager and torch.compile, same model, batch,
# precision and optimizer (SGD momentum 0.9, weight decay 1e-4), in one run.
#   1 GPU: ResNet-50 bf16 batch 256 (the goal) and at the batches of BENCH_BATCHES, ResNet-18 bf16
#   batch 256, ResNet-50 fp32 batch 128 (TF32 convolutions on both sides: PyTorch's default),
#   through gpu_model_driver (ours; the step replayed as a CUDA graph, the figure without it
#   beside) and tests/worker/gpu/bench_torch.py (PyTorch: eager, torch.compile default mode, and
#   mode max-autotune-no-cudagraphs with BENCH_COMPILE_MAX=1).
#   N GPUs (issue 7): ResNet-50 bf16, batch 256 per GPU, for every N of GPU_COUNTS: ours through
#   `launch --gpus 0,..,N-1 train_resnet`, PyTorch through `torchrun --nproc_per_node N` + DDP
#   (N = 1: the single-process PyTorch run above, which has no DDP to pay for). On 1 GPU the
#   trainer also runs with --cuda-graph off: its step with and without the CUDA graph.
#   fp16 (ours only: the PyTorch rows stay bf16): ResNet-50 b256 with the fused conv+genstats
#   forward (WORKER_FP16_FUSED=auto, the default) and without it (=0), each against bf16's row.
# Images/s are medians of timed windows after warm-up; peak memory is what each framework's
# allocator handed out (ours: the pool's high-water mark; torch: max_memory_allocated); time to
# the first step counts from the command's start (BENCH_T0). For ours on N GPUs the trainer
# also reports the all-reduce time per step (CUDA events on the communication stream) and how
# much of it ran after backward had ended (exposed, i.e. not hidden by overlap).
# Usage: scripts/bench_gpu.sh
#   GPU_COUNTS="1 2 4"  GPU counts of the scaling table (default: powers of two up to the
#                       visible count)
#   BENCH_QUICK=1       ResNet-50 bf16 only (no ResNet-18, no fp32 rows)
#   BENCH_BATCHES="512" ours at more ResNet-50 bf16 batches (default 512; "" for none)
#   BENCH_COMPILE=0     no torch.compile rows (default 1: mode "default")
#   BENCH_COMPILE_MAX=1 also torch.compile mode max-autotune-no-cudagraphs (minutes of autotuning)
#   BENCH_FIND=1        also ours with cuDNN's timed algorithm search
#   GPU_BIN             folder of our binaries (default .gpu/bin, else build/bin)
#   OUT                 where logs go (default out/gpu); the table is printed last
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${GPU_BIN:-$root/.gpu/bin}"
for b in "$BIN" "$root/build/bin"; do
  if [ -x "$b/gpu_model_driver" ]; then BIN="$b"; break; fi
done
OUT="${OUT:-$root/out/gpu}"
mkdir -p "$OUT/bench"
log="$OUT/bench"
PY=python3
SP="$($PY -c 'import site; print(site.getsitepackages()[0])')"
# Last: libraries carried beside the binaries (libgomp, libfmt) only where the machine lacks them.
export LD_LIBRARY_PATH="$SP/nvidia/cu13/lib:$SP/nvidia/cudnn/lib:$SP/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}:$BIN/../lib"
# NVLink multicast must stay off on the shared machine (../shared/DEVICE.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
if [ -z "${GPU_COUNTS:-}" ]; then
  GPU_COUNTS=""
  for n in 1 2 4 8 16; do [ "$n" -le "$ngpu" ] && GPU_COUNTS="$GPU_COUNTS $n"; done
fi
torch_py="$root/tests/worker/gpu/bench_torch.py"
results="$log/results.jsonl"
: > "$results"
# Short timed windows: the whole benchmark must fit in gpu_check.sh's budget (~3 minutes on
# 4 GPUs, most of it PyTorch's start-up under torchrun); torch.compile needs ~1 minute more.
TORCH_WIN=(--steps-per-window 8 --windows 4 --warmup 4)

now() { date +%s.%N; }
# BENCH_DEADLINE (epoch seconds, set by gpu_check.sh): no item runs past it; what no longer
# fits is skipped (an error row) so that the table is always printed.
BENCH_DEADLINE="${BENCH_DEADLINE:-$(( $(date +%s) + 3600 ))}"
tmo() {  # wanted seconds -> what the deadline allows (0: skip)
  local left=$(( BENCH_DEADLINE - $(date +%s) - 8 ))
  if [ "$left" -lt 15 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
skipped() {  # what gpus depth precision
  echo "{\"what\": \"$1\", \"gpus\": $2, \"depth\": $3, \"precision\": \"$4\", \"error\": \"skipped: out of time\"}" >> "$results"
}

ours1() {  # depth precision batch [env...]
  local d=$1 p=$2 b=$3; shift 3
  local tag="ours_r${d}_${p}_b${b}${1:+_${1%%=*}}" t
  t=$(tmo 90); [ "$t" -eq 0 ] && { skipped ours 1 "$d" "$p"; return; }
  env "$@" BENCH_T0="$(now)" timeout "$t" "$BIN/gpu_model_driver" bench --depth "$d" --precision "$p" \
    --batch "$b" --steps-per-window 8 --windows 4 --graph 1 > "$log/$tag.json" 2> "$log/$tag.err"
  local rc=$?
  if [ $rc -eq 0 ]; then sed "s/^{/{\"gpus\": 1, \"env\": \"$*\", /" "$log/$tag.json" >> "$results"
  else echo "{\"what\": \"ours\", \"gpus\": 1, \"depth\": $d, \"precision\": \"$p\", \"batch\": $b, \"error\": \"rc $rc, see $tag.err\"}" >> "$results"; fi
}

torch1() {  # depth precision batch [compile mode]
  local d=$1 p=$2 b=$3 mode=${4:-} t want=90
  local tag="torch_r${d}_${p}_b${b}${mode:+_$mode}"
  [ -n "$mode" ] && want=150
  [ "$mode" = max-autotune-no-cudagraphs ] && want=420
  t=$(tmo $want); [ "$t" -eq 0 ] && { skipped "torch${mode:+ compile:$mode}" 1 "$d" "$p"; return; }
  BENCH_T0="$(now)" timeout "$t" $PY "$torch_py" --depth "$d" --precision "$p" --batch "$b" "${TORCH_WIN[@]}" \
    ${mode:+--compile "$mode"} > "$log/$tag.json" 2> "$log/$tag.err"
  local rc=$?
  if [ $rc -eq 0 ]; then tail -1 "$log/$tag.json" >> "$results"
  else echo "{\"what\": \"torch\", \"mode\": \"${mode:+compile:}${mode:-eager}\", \"gpus\": 1, \"depth\": $d, \"precision\": \"$p\", \"error\": \"rc $rc, see $tag.err\"}" >> "$results"; fi
}

# Ours on N GPUs through the launcher and the real trainer: from its metrics file, images/s
# (windows of 8 steps, the first window dropped as warm-up), the all-reduce time per step and
# the peak memory (its final record).
# A fifth argument, the trainer's --cuda-graph (default auto: captured on one GPU), names the row
# "ours-launch-graph-<value>" instead.
oursN() {  # n depth precision batch [cuda-graph]
  local n=$1 d=$2 p=$3 b=$4 g=${5:-}
  local what="ours-launch${g:+-graph-$g}"
  local gpus tag="launch_g${n}_r${d}_${p}_b${b}${g:+_graph_$g}" t0 rc t1 t
  t=$(tmo 90); [ "$t" -eq 0 ] && { skipped "$what" "$n" "$d" "$p"; return; }
  gpus="$(seq -s, 0 $((n - 1)))"
  t0="$(now)"
  timeout "$t" "$BIN/launch" --gpus "$gpus" "$BIN/train_resnet" --depth "$d" --precision "$p" \
    --batch-size "$b" --optimizer sgd --lr 0.1 --momentum 0.9 --weight-decay 1e-4 --data random \
    --num-samples 1000000 --max-steps 41 --log-every 8 --metrics-file "$log/$tag.metrics.jsonl" \
    ${g:+--cuda-graph "$g"} > "$log/$tag.log" 2>&1
  rc=$?
  t1="$(now)"
  $PY - "$log/$tag.metrics.jsonl" "$rc" "$n" "$d" "$p" "$b" "$t0" "$t1" "$what" >> "$results" <<'PY'
import json, statistics, sys
path, rc, n, d, p, b, t0, t1, what = sys.argv[1:]
try:
    rows = [json.loads(l) for l in open(path) if l.strip()]
except (OSError, ValueError):
    rows = []
win = [r for r in rows if not r.get("final") and r.get("images_per_s")][1:]
fin = next((r for r in rows if r.get("final")), {})
out = {"what": what, "gpus": int(n), "depth": int(d), "precision": p, "batch": int(b),
       "wall_s": round(float(t1) - float(t0), 1)}
if rc != "0" or not win:
    out["error"] = f"rc {rc}, {len(win)} timed windows"
else:
    out["images_per_s"] = statistics.median(r["images_per_s"] for r in win)
    ar = [r["allreduce_ms"] for r in win if "allreduce_ms" in r]
    if ar:
        out["allreduce_ms"] = statistics.median(ar)
        out["allreduce_exposed_ms"] = statistics.median(r["allreduce_exposed_ms"] for r in win if "allreduce_exposed_ms" in r)
    for k in ("peak_bytes", "peak_bytes_max_rank"):
        if k in fin:
            out[k] = fin[k]
print(json.dumps(out))
PY
}

torchN() {  # n depth precision batch
  local n=$1 d=$2 p=$3 b=$4 tag="torchrun_g${1}_r${2}_${3}" t
  t=$(tmo 120); [ "$t" -eq 0 ] && { skipped torch "$n" "$d" "$p"; return; }
  BENCH_T0="$(now)" timeout "$t" torchrun --standalone --nproc_per_node "$n" "$torch_py" --depth "$d" \
    --precision "$p" --batch "$b" "${TORCH_WIN[@]}" --no-kernels > "$log/$tag.json" 2> "$log/$tag.err"
  local rc=$?
  if [ $rc -eq 0 ] && grep -q '^{' "$log/$tag.json"; then grep '^{' "$log/$tag.json" | tail -1 >> "$results"
  else echo "{\"what\": \"torch\", \"gpus\": $n, \"depth\": $d, \"precision\": \"$p\", \"error\": \"rc $rc, see $tag.err\"}" >> "$results"; fi
}

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv > "$log/gpus.csv" 2>&1
echo "bench_gpu: $ngpu GPU(s), GPU_COUNTS=$GPU_COUNTS, binaries from $BIN"

# Most important first: should the deadline cut the run short, what is left out is the least
# needed (the scaling table of issue 7 before the ResNet-18 and fp32 rows).
ours1 50 bf16 256
torch1 50 bf16 256
[ "${BENCH_COMPILE:-1}" = 1 ] && torch1 50 bf16 256 default
# fp16 with the convolutions that feed a batch norm fused with its statistics, and without.
ours1 50 fp16 256
ours1 50 fp16 256 WORKER_FP16_FUSED=0
for b in ${BENCH_BATCHES-512}; do ours1 50 bf16 "$b"; done
if [ -x "$BIN/launch" ] && [ -x "$BIN/train_resnet" ]; then
  for n in $GPU_COUNTS; do [ "$n" -le "$ngpu" ] && oursN "$n" 50 bf16 256; done
  # The trainer's own step without its CUDA graph (issue 13), beside the N = 1 row above.
  oursN 1 50 bf16 256 off
fi
for n in $GPU_COUNTS; do [ "$n" -gt 1 ] && [ "$n" -le "$ngpu" ] && torchN "$n" 50 bf16 256; done
if [ "${BENCH_QUICK:-0}" != 1 ]; then
  ours1 18 bf16 256
  torch1 18 bf16 256
  ours1 50 fp32 128 WORKER_GPU_TF32=1
  torch1 50 fp32 128
fi
# What the graph-API convolution engines give (the same step on the legacy API's plans only).
ours1 50 bf16 256 WORKER_CONV_ENGINES=legacy
# The cuDNN workspace is 0.2 GB of our peak: what does a smaller cap cost in speed?
ours1 50 bf16 256 WORKER_CUDNN_WORKSPACE_MB=64
[ "${BENCH_FIND:-0}" = 1 ] && ours1 50 bf16 256 WORKER_CUDNN_SEARCH=find
[ "${BENCH_COMPILE_MAX:-0}" = 1 ] && torch1 50 bf16 256 max-autotune-no-cudagraphs

# --- The table
$PY - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def find(what, gpus, depth, prec, pred=lambda r: True):
    for r in rows:
        if r.get("what") == what and r.get("gpus") == gpus and r.get("depth") == depth and r.get("precision") == prec and pred(r):
            return r
    return None
def ok(r):
    return r is not None and "images_per_s" in r
print("bench (images/s = median of timed windows after warm-up; ratio = ours / the best PyTorch row; peak = allocator high-water mark;")
print("       first = s from command start to the first finished step; kernels = launched per training step)")
print(f"{'config':38s} {'images/s':>9s} {'ratio':>6s} {'peak GB':>8s} {'first s':>8s} {'kernels':>8s}")
def fmt(r, k, f="{:.0f}"):
    return f.format(r[k]) if r and k in r else ("ERR" if r and "error" in r else "-")
def torch_rows(d, p, b=None):
    return [r for r in rows if r.get("what") == "torch" and r.get("gpus") == 1 and r.get("depth") == d
            and r.get("precision") == p and (b is None or r.get("batch") == b)]
def line(label, r, best):
    ratio = f"{r['images_per_s'] / best:.2f}" if ok(r) and best else "-"
    peak = f"{r['peak_bytes'] / 1e9:.2f}" if r and "peak_bytes" in r else "-"
    kern = str(r["kernels_per_step"]) if r and "kernels_per_step" in r else "-"
    print(f"{label:38s} {fmt(r, 'images_per_s'):>9s} {ratio:>6s} {peak:>8s} {fmt(r, 'first_step_s', '{:.1f}'):>8s} {kern:>8s}")
for (d, p, b, label) in [(50, "bf16", 256, "ResNet-50 bf16 b256"), (18, "bf16", 256, "ResNet-18 bf16 b256"),
                         (50, "fp32", 128, "ResNet-50 fp32/TF32 b128")]:
    o = find("ours", 1, d, p, lambda r: r.get("batch") == b and (not r.get("env") or "TF32" in r.get("env", "")))
    ts = torch_rows(d, p, b)
    if not o and not ts:
        continue
    best = max((t["images_per_s"] for t in ts if ok(t)), default=None)
    line(f"{label} ours (CUDA graph)", o, best)
    if ok(o) and "images_per_s_stream" in o:
        print(f"{'  ours without the CUDA graph':38s} {o['images_per_s_stream']:>9.0f} "
              f"{(o['images_per_s_stream'] / best if best else 0):>6.2f}")
    for t in ts:
        line(f"  torch {t.get('mode', 'eager')}", t, best)
# fp16 against the same PyTorch rows (bf16 autocast: PyTorch's fp16 would need loss scaling too) and ours bf16.
bf = find("ours", 1, 50, "bf16", lambda r: r.get("batch") == 256 and not r.get("env"))
best50 = max((t["images_per_s"] for t in torch_rows(50, "bf16", 256) if ok(t)), default=None)
for env, label in [("", "ResNet-50 fp16 b256 ours (CUDA graph)"), ("WORKER_FP16_FUSED=0", "  fp16 b256, WORKER_FP16_FUSED=0")]:
    h = find("ours", 1, 50, "fp16", lambda r: r.get("batch") == 256 and r.get("env", "") == env)
    if not h:
        continue
    line(label, h, best50)
    if ok(h) and ok(bf):
        fused = sum(": graph " in l for l in h.get("conv_engines", []) if " fwd+stats: " in l)
        tuned = sum(" fwd+stats: " in l for l in h.get("conv_engines", []))
        print(f"{'    fp16 / ours bf16 (CUDA graph)':38s} {h['images_per_s'] / bf['images_per_s']:>9.3f}"
              + (f"   fused forward on {fused} of {tuned} shapes, {h.get('warmup_steps', '?')} warm-up steps" if tuned else ""))
for r in rows:
    if r.get("what") == "ours" and r.get("depth") == 50 and r.get("precision") == "bf16" and r.get("batch") != 256 \
            and not r.get("env"):
        line(f"ResNet-50 bf16 b{r['batch']} ours (CUDA graph)", r, None)
for env, label in [("WORKER_CONV_ENGINES=legacy", "  b256, legacy cuDNN API plans only"),
                   ("WORKER_CUDNN_WORKSPACE_MB=64", "  b256, cuDNN workspace <= 64 MiB"),
                   ("WORKER_CUDNN_SEARCH=find", "  b256, cuDNN timed search")]:
    h = find("ours", 1, 50, "bf16", lambda r: r.get("env") == env)
    if h:
        line(label, h, None)
o = find("ours", 1, 50, "bf16", lambda r: not r.get("env"))
if o and "memory" in o:
    print("  ours r50 bf16 b256 memory, GB: " + ", ".join(f"{k} {v/1e9:.2f}" for k, v in o["memory"].items()))
for r in rows:
    if r.get("what") == "ours" and "workspace_bytes" in r:
        print(f"  ours r{r['depth']} {r['precision']} {r.get('env', '')} ({r['backend'].split('conv algorithms by ')[-1].rstrip(')')}): "
              f"cuDNN workspace {r['workspace_bytes']/2**20:.0f} MiB, pool reserved {r['reserved_bytes']/1e9:.1f} GB, "
              f"algorithm choice {r['algo_search_s']:.1f} s, loss {r['first_loss']:.3f} -> {r['last_loss']:.3f}")

# Scaling: ours through launch + train_resnet, torch through torchrun + DDP (N = 1: plain torch).
ns = sorted({r["gpus"] for r in rows if r.get("what") == "ours-launch"} |
            {r["gpus"] for r in rows if r.get("what") == "torch" and r.get("depth") == 50 and r.get("precision") == "bf16"})
if ns:
    print()
    print("scaling, ResNet-50 bf16, batch 256 per GPU (ours: launch + train_resnet; torch: torchrun + DDP; eff = per-GPU images/s vs N=1,")
    print("         ours N=1 with --cuda-graph off, as several ranks run; the CUDA graph's N=1 figure is the line below)")
    print(f"{'N':>2s} {'ours':>8s} {'torch':>8s} {'ratio':>6s} {'ours/GPU':>9s} {'torch/GPU':>9s} {'eff ours':>9s} {'eff torch':>9s} "
          f"{'step ms o/t':>12s} {'allreduce ms (exposed)':>23s} {'peak GB':>8s}")
    # Several ranks run uncaptured (step_capture.h): their efficiency is against the uncaptured N = 1.
    o1 = find("ours-launch-graph-off", 1, 50, "bf16") or find("ours-launch", 1, 50, "bf16")
    t1 = find("torch", 1, 50, "bf16")
    for n in ns:
        o, t = (o1 if n == 1 else find("ours-launch", n, 50, "bf16")), find("torch", n, 50, "bf16")
        oi = o["images_per_s"] if ok(o) else None
        ti = t["images_per_s"] if ok(t) else None
        s = lambda v, f="{:.0f}": f.format(v) if v is not None else ("ERR" if v is None else "-")
        ratio = f"{oi / ti:.2f}" if oi and ti else "-"
        eo = f"{oi / (n * o1['images_per_s']) * 100:.1f}%" if oi and ok(o1) else "-"
        et = f"{ti / (n * t1['images_per_s']) * 100:.1f}%" if ti and ok(t1) else "-"
        step = f"{(256 * n / oi * 1e3) if oi else 0:.1f}/{(256 * n / ti * 1e3) if ti else 0:.1f}"
        ar = f"{o['allreduce_ms']:.2f} ({o['allreduce_exposed_ms']:.2f})" if o and "allreduce_ms" in o else "-"
        pk = f"{o['peak_bytes_max_rank']/1e9:.2f}" if o and "peak_bytes_max_rank" in o else "-"
        print(f"{n:>2d} {s(oi):>8s} {s(ti):>8s} {ratio:>6s} {s(oi / n if oi else None):>9s} {s(ti / n if ti else None):>9s} "
              f"{eo:>9s} {et:>9s} {step:>12s} {ar:>23s} {pk:>8s}")
# The trainer itself, one GPU, with its step captured as a CUDA graph (auto) and without (off).
tg, tn = find("ours-launch", 1, 50, "bf16"), find("ours-launch-graph-off", 1, 50, "bf16")
if ok(tg) and ok(tn):
    print()
    print(f"train_resnet ResNet-50 bf16 b256, 1 GPU: CUDA graph {tg['images_per_s']:.0f} images/s, "
          f"without {tn['images_per_s']:.0f} ({tg['images_per_s'] / tn['images_per_s']:.3f}x)")
for r in rows:
    if "error" in r:
        print("  error:", json.dumps(r))
PY
