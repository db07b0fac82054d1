#!/usr/bin/env bash
# Time to the first step as a user sees it (issue 24: under 2 s): from the command's start to the
# trainer's Start-up line (printed once the first step has ended), for `launch --gpus 0 train_resnet`
# (ResNet-50, batch 256, random data, --precision auto) under each environment variant, against
# PyTorch eager's first finished step from its command's start (tests/worker/gpu/bench_torch.py,
# bf16, the same model and batch; `import torch` included). Rounds alternate the variants and
# PyTorch, so that a drift of the machine hits them all. Prints every run's seconds, each one's
# median, PyTorch's median over it, and the median of each part the Start-up line names.
# Usage: scripts/bench_startup.sh [VARIANT ...]   (none: the defaults only)
#   VARIANT  space-separated VAR=VALUE settings, "" for the defaults, e.g.
#            scripts/bench_startup.sh "" "WORKER_PLAN_THREADS=8"
#   STARTUP_ROUNDS=3      rounds
#   STARTUP_TORCH=1       0: no PyTorch runs
#   STARTUP_ARGS="--depth 50 --batch-size 256"   the trainer's model and batch
#   STARTUP_DEVICES="--gpus 0"   launch's device arguments; "--devices cpu" (with a small model in
#                         STARTUP_ARGS and STARTUP_TORCH=0) tries the script on a machine without a GPU
#   GPU_BIN  folder of our binaries (default .gpu/bin, else build/bin); OUT  where logs go (out/gpu)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/gpu_env.sh
. "$root/scripts/gpu_env.sh"
gpu_env train_resnet
[ -x "$BIN/launch" ] || { echo "bench_startup: no launch in $BIN: build it (cmake --build build --target launch train_resnet)" >&2; exit 2; }
[ $# -ge 1 ] || set -- ""
check_variants bench_startup "$@"
rounds="${STARTUP_ROUNDS:-3}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_startup: STARTUP_ROUNDS='$rounds' is not a positive whole number" >&2; exit 2; }
OUT="${OUT:-$root/out/gpu}"
log="$OUT/startup"
mkdir -p "$log"
BIN="$BIN" LOG="$log" ROUNDS="$rounds" TORCH="${STARTUP_TORCH:-1}" TORCH_PY="$root/tests/worker/gpu/bench_torch.py" \
  ARGS="${STARTUP_ARGS:---depth 50 --batch-size 256}" DEVICES="${STARTUP_DEVICES:---gpus 0}" \
  python3 - "$@" <<'EOF'
import json, os, re, shlex, statistics, subprocess, sys, time

binp, log, rounds = os.environ["BIN"], os.environ["LOG"], int(os.environ["ROUNDS"])
variants = sys.argv[1:]
trainer = ([f"{binp}/launch"] + shlex.split(os.environ["DEVICES"]) + [f"{binp}/train_resnet"] +
           shlex.split(os.environ["ARGS"]) +
           "--data random --num-samples 100000 --max-steps 2 --log-every 1 --precision auto --optimizer sgd "
           "--lr 0.1 --momentum 0.9 --weight-decay 1e-4".split())
depth = re.search(r"--depth (\d+)", os.environ["ARGS"])
batch = re.search(r"--batch-size (\d+)", os.environ["ARGS"])
torch_cmd = ["python3", os.environ["TORCH_PY"], "--depth", depth.group(1) if depth else "50", "--batch",
             batch.group(1) if batch else "256", "--precision", "bf16", "--steps-per-window", "1", "--windows", "1",
             "--warmup", "0", "--no-kernels"]
PART = re.compile(r"(to the training session|data|model|weights|first step|[A-Za-z]+) ([0-9]+\.[0-9]+)")

def ours(v, tag):
    env = dict(os.environ)
    env.update(kv.split("=", 1) for kv in v.split())
    t0 = time.monotonic()
    seen, parts = None, {}
    with open(f"{log}/{tag}.log", "w") as f:
        # timeout: the run ends by itself even if the trainer hangs before its first step
        p = subprocess.Popen(["timeout", "180"] + trainer, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        for line in p.stdout:
            f.write(line)
            if seen is None and line.startswith("Start-up:"):
                seen = time.monotonic() - t0
                parts = {"trainer's total": float(re.search(r"ended ([0-9.]+) s", line).group(1))}
                parts.update((k, float(x)) for k, x in PART.findall(line.split("(", 1)[1]))
        rc = p.wait()
    if rc != 0 or seen is None:
        print(f"bench_startup: variant '{v}' failed (rc {rc}); see {log}/{tag}.log", file=sys.stderr)
        return None, {}
    return seen, parts

def torch(tag):
    env = dict(os.environ, BENCH_T0=repr(time.time()))
    p = subprocess.run(["timeout", "300"] + torch_cmd, env=env, capture_output=True, text=True)
    with open(f"{log}/{tag}.log", "w") as f:
        f.write(p.stdout + p.stderr)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])["first_step_s"]
    except Exception:
        print(f"bench_startup: PyTorch failed (rc {p.returncode}); see {log}/{tag}.log", file=sys.stderr)
        return None

runs = {v: [] for v in variants}
parts = {v: [] for v in variants}
torch_runs = []
for r in range(rounds):
    for i, v in enumerate(variants):
        s, pt = ours(v, f"ours_{i}_{r}")
        if s is not None:
            runs[v].append(s)
            parts[v].append(pt)
    if os.environ["TORCH"] == "1":
        s = torch(f"torch_{r}")
        if s is not None:
            torch_runs.append(s)

med = lambda xs: statistics.median(xs) if xs else float("nan")
print(f"\nTime to the first step from the command's start, s (launch {os.environ['DEVICES']} train_resnet {os.environ['ARGS']}; "
      f"{rounds} round(s)):")
print(f"{'variant':34s} {'median':>7s} {'runs':28s} {'PyTorch / it':>12s}")
tm = med(torch_runs)
for v in variants:
    m = med(runs[v])
    ratio = f"{tm / m:.1f}x" if torch_runs and runs[v] else "-"
    print(f"{(v or 'defaults'):34s} {m:7.2f} {' '.join(f'{x:.2f}' for x in runs[v]):28s} {ratio:>12s}")
if torch_runs:
    print(f"{'PyTorch eager (bf16)':34s} {tm:7.2f} {' '.join(f'{x:.2f}' for x in torch_runs):28s}")
print("\nThe Start-up line's parts, medians (s):")
for v in variants:
    names = list(dict.fromkeys(k for p in parts[v] for k in p))
    print(f"  {v or 'defaults'}: " + ", ".join(f"{k} {med([p[k] for p in parts[v] if k in p]):.2f}" for k in names))
if any(not runs[v] for v in variants):
    sys.exit(1)
EOF
