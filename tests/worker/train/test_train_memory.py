#!/usr/bin/python3
"""Issue 15 through the real binaries: ZeRO-1 and activation recomputation in train_resnet.

Usage: test_train_memory.py CASE --train PATH --launch PATH
Cases:
  zero      2 and 3 CPU ranks, Adam and SGD (Nesterov, weight-decay mask, label smoothing,
            warm-up + cosine schedule, accumulation), small buckets so that shard boundaries fall
            inside tensors and 3 ranks get blocks of unequal size: --zero 1 ends with the same
            parameters as --zero 0, bit for bit, and every rank agrees; the optimizer state per
            rank is at most 1/world of the whole plus one element per bucket.
  resume    a checkpoint saved with --zero 1 resumes without it, and the other way round, and
            both end where the uninterrupted run ends; a --zero 1 checkpoint holds the same
            optimizer state, bit for bit, as the unsharded run's at that step.
  recompute --recompute bn and block through the trainer (ResNet-50, 2 ranks) end with the
            parameters of --recompute none; the run reports its mode; bad values are refused.
  zero_gpu  [gpu] 2 ranks sharing GPU 0 (--comm ring: the ring through host memory, as NCCL
            refuses two ranks on one device), bf16 Adam and fp16 SGD: --zero 1, whose fp32 master
            weights are sharded too, ends with the parameters of --zero 0 bit for bit; each rank
            keeps half the fp32 weights (plus at most one element per bucket) and peaks lower;
            a checkpoint saved with --zero 1 resumes without it and the other way round.
Exit 0 pass, 1 fail, 77 skipped (`launch` not built, or no GPU for zero_gpu).

Why "equal" is bitwise here: on the ring a reduce-scatter is the first half of the all-reduce
over the same buckets, so every gradient element is summed by the same additions in the same
order in both runs (worker/train/ring_comm.cpp); the optimizer is element-wise and the all-gather
copies. A difference of one ulp anywhere is therefore a bug, not rounding.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_train_resnet import SKIP, check, checksums, launch_run, main, ok, read_st, run  # noqa: E402

# ResNet-18 width 8: 177,362 parameters. --bucket-mb 0.05 = 13,107 floats: 14 buckets, the
# first (the buffer's start) of 6,971 elements, which 3 ranks split 2,323 / 2,324 / 2,324.
NET = ["--depth", "18", "--width", "8", "--image-size", "32", "--num-classes", "10", "--data", "learnable",
       "--batch-size", "8", "--threads", "1", "--bucket-mb", "0.05"]
RECIPES = {
    "adam": ["--optimizer", "adam", "--lr", "2e-3", "--weight-decay", "1e-4", "--label-smoothing", "0.1",
             "--lr-schedule", "cosine", "--warmup-epochs", "0.5"],
    "sgd": ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.875", "--nesterov", "--weight-decay", "3e-5",
            "--no-wd-on-bn-bias", "--label-smoothing", "0.1", "--accum-steps", "2"],
}


def final_record(path):
    with open(path) as f:
        fin = [j for j in map(json.loads, f) if j.get("final")]
    check(len(fin) == 1, f"{path}: {len(fin)} final records")
    return fin[0]


def needs_launch(a):
    if not os.access(a.launch, os.X_OK):
        print(f"skipped: {a.launch} is not built")
        return True
    return False


def agreed_checksum(text, n, what):
    cs = checksums(text)
    check(sorted(cs) == [str(r) for r in range(n)], f"{what}: checksum lines of ranks {sorted(cs)}:\n{text[-3000:]}")
    check(len(set(cs.values())) == 1, f"{what}: ranks differ: {cs}")
    check(f"Checksums: all {n} rank(s) agree" in text, f"{what}: no agreement line")
    return cs["0"]


def case_zero(a, tmp):
    if needs_launch(a):
        return SKIP
    for n in (2, 3):
        for name, recipe in RECIPES.items():
            args = NET + recipe + ["--num-samples", "192", "--epochs", "2", "--log-every", "4"]
            _, plain = launch_run(a, tmp, n, args + ["--metrics-file", f"{tmp}/p.jsonl"], f"plain{n}{name}")
            _, sharded = launch_run(a, tmp, n, args + ["--zero", "1", "--metrics-file", f"{tmp}/z.jsonl"],
                                    f"zero{n}{name}")
            what = f"{n} ranks, {name}"
            ref = agreed_checksum(plain, n, what + " --zero 0")
            got = agreed_checksum(sharded, n, what + " --zero 1")
            check(got == ref, f"{what}: --zero 1 ended with {got}, --zero 0 with {ref}")
            # Bytes per parameter of state: Adam's two moments, SGD's momentum and decay mask.
            per_param = 8 if name == "adam" else 5
            params = int(re.search(r"(\d+) parameters\)", plain).group(1))
            whole = final_record(f"{tmp}/p.jsonl")["optimizer_state_bytes_max_rank"]
            per_rank = final_record(f"{tmp}/z.jsonl")["optimizer_state_bytes_max_rank"]
            buckets = int(re.search(r"(\d+) bucket\(s\)", sharded).group(1))
            check(whole == params * per_param, f"{what}: unsharded state {whole} bytes, expected {params * per_param}")
            check(params // n * per_param <= per_rank <= (params // n + buckets) * per_param,
                  f"{what}: {per_rank} bytes per rank, not 1/{n} of {whole} plus at most one element per bucket")
            check(re.search(r"Optimizer state: [0-9.]+ MB per rank \(largest of \d+; unsharded", sharded),
                  f"{what}: no 'Optimizer state' line:\n{sharded[-2000:]}")
            check("Optimizer state" not in plain, f"{what}: the unsharded run printed a ZeRO line")
            print(f"{what}: --zero 1 == --zero 0 ({got}); optimizer state {per_rank} of {whole} bytes per rank, "
                  f"{buckets} buckets")


def case_resume(a, tmp):
    if needs_launch(a):
        return SKIP
    n = 2
    base = NET + RECIPES["adam"] + ["--num-samples", "128", "--epochs", "2"]
    _, full = launch_run(a, tmp, n, base, "full")
    ref = agreed_checksum(full, n, "uninterrupted")
    for first, second in ((["--zero", "1"], []), ([], ["--zero", "1"])):
        ck = f"{tmp}/ck{len(first)}.safetensors"
        launch_run(a, tmp, n, base + first + ["--max-steps", "5", "--save", ck], f"first{len(first)}")
        _, rest = launch_run(a, tmp, n, base + second + ["--resume", ck], f"rest{len(first)}")
        check("Resuming from" in rest, "the second run did not resume")
        got = agreed_checksum(rest, n, f"resumed {first} -> {second}")
        check(got == ref, f"saved with {first or 'no --zero'}, resumed with {second or 'no --zero'}: {got}, "
                          f"uninterrupted {ref}")
        print(f"saved with {' '.join(first) or '--zero 0'}, resumed with {' '.join(second) or '--zero 0'}: equal")
    # The gathered state is the unsharded state: both first halves saved at step 5 the same bits.
    sharded, _ = read_st(f"{tmp}/ck2.train.safetensors")
    plain, _ = read_st(f"{tmp}/ck0.train.safetensors")
    check(sorted(sharded) == sorted(plain), f"tensors differ: {sorted(sharded)} vs {sorted(plain)}")
    for k in plain:
        check(plain[k].shape == sharded[k].shape and plain[k].tobytes() == sharded[k].tobytes(),
              f"{k}: the --zero 1 checkpoint differs from the unsharded one")
    w0, _ = read_st(f"{tmp}/ck0.safetensors")
    w1, _ = read_st(f"{tmp}/ck2.safetensors")
    check(sorted(w0) == sorted(w1) and all(w0[k].tobytes() == w1[k].tobytes() for k in w0), "weights differ at step 5")
    print(f"step-5 checkpoints with and without --zero 1 are identical ({', '.join(sorted(plain))})")


def case_recompute(a, tmp):
    if needs_launch(a):
        return SKIP
    for bad, needle in ((["--recompute", "all"], "--recompute must be none, bn or block"),
                        (["--zero", "2"], "--zero must be 0"), (["--bucket-mb", "0"], "--bucket-mb")):
        p = run([a.train] + bad)
        check(p.returncode == 2 and needle in p.stderr, f"{bad}: exit {p.returncode}, stderr {p.stderr!r}")
    n = 2
    args = ["--depth", "50", "--width", "8", "--image-size", "32", "--num-classes", "10", "--data", "learnable",
            "--batch-size", "4", "--threads", "1", "--num-samples", "48", "--epochs", "1", "--optimizer", "sgd",
            "--metrics-file"]
    results = {}
    for mode in ("none", "bn", "block"):
        metrics = f"{tmp}/{mode}.jsonl"
        _, text = launch_run(a, tmp, n, args + [metrics, "--recompute", mode], mode)
        results[mode] = agreed_checksum(text, n, f"--recompute {mode}")
        check(mode == "none" or f"Memory: recompute {mode}" in text, f"--recompute {mode} not announced")
        with open(metrics) as f:
            fin = [line for line in f if '"final": true' in line or '"final":true' in line]
        check(fin and f'"recompute":"{mode}"' in fin[0].replace(" ", ""), f"final record lacks the mode: {fin}")
    check(len(set(results.values())) == 1, f"recompute modes end differently: {results}")
    print(f"ResNet-50, 2 ranks: none == bn == block ({results['none']})")


def gpu_ready(a):
    """Whether a.train has the GPU backend and a GPU is visible (else the [gpu] case is skipped)."""
    p = run([a.train, "--device", "gpu", "--depth", "18", "--width", "8", "--image-size", "32", "--num-classes",
             "10", "--data", "random", "--batch-size", "2", "--num-samples", "2", "--max-steps", "1"])
    if p.returncode != 0:
        print(f"skipped: no GPU run here ({(p.stderr.strip().splitlines() or ['?'])[-1]})")
        return False
    return True


# Both runs of a comparison must compute alike: cuDNN's deterministic algorithms, legacy plans
# (the graph-API engines are chosen by timing, which differs between runs).
GPU_ENV = {"WORKER_CUDNN_DETERMINISTIC": "1", "WORKER_CONV_ENGINES": "legacy", "NCCL_NVLS_ENABLE": "0"}
# ResNet-18 width 16: 701,466 parameters; --bucket-mb 0.5 = 131,072 floats: 6 buckets.
GPU_NET = ["--depth", "18", "--width", "16", "--image-size", "64", "--num-classes", "10", "--data", "learnable",
           "--batch-size", "16", "--device", "gpu", "--comm", "ring", "--bucket-mb", "0.5"]
GPU_RECIPES = {"bf16 adam": ["--precision", "bf16"] + RECIPES["adam"],
               "fp16 sgd": ["--precision", "fp16"] + RECIPES["sgd"]}


def case_zero_gpu(a, tmp):
    if needs_launch(a) or not gpu_ready(a):
        return SKIP
    n = 2
    for name, recipe in GPU_RECIPES.items():
        args = GPU_NET + recipe + ["--num-samples", "256", "--epochs", "2", "--log-every", "4"]
        _, plain = launch_run(a, tmp, n, args + ["--metrics-file", f"{tmp}/p.jsonl"], f"gplain{name}", GPU_ENV)
        _, sharded = launch_run(a, tmp, n, args + ["--zero", "1", "--metrics-file", f"{tmp}/z.jsonl"],
                                f"gzero{name}", GPU_ENV)
        ref = agreed_checksum(plain, n, name + " --zero 0")
        got = agreed_checksum(sharded, n, name + " --zero 1")
        check(got == ref, f"{name}: --zero 1 ended with {got}, --zero 0 with {ref}")
        params = int(re.search(r"(\d+) parameters\)", plain).group(1))
        buckets = int(re.search(r"(\d+) bucket\(s\)", sharded).group(1))
        p, z = final_record(f"{tmp}/p.jsonl"), final_record(f"{tmp}/z.jsonl")
        check(p["fp32_weight_bytes"] == 4 * params, f"{name}: unsharded fp32 weights {p['fp32_weight_bytes']} bytes")
        check(params // n * 4 <= z["fp32_weight_bytes"] <= (params // n + buckets) * 4,
              f"{name}: {z['fp32_weight_bytes']} bytes of fp32 weights on rank 0, not half of {4 * params}")
        m = re.search(r"fp32 master weights ([0-9.]+) MB on rank 0 \(whole ([0-9.]+) MB\)", sharded)
        check(m, f"{name}: no 'fp32 master weights' in the ZeRO line:\n{sharded[-2000:]}")
        # Half the fp32 weights and half the optimizer state are gone; the 1-D parameters' fp32
        # copies (a few thousand floats) come back.
        saved = 4 * params // 2 + (p["optimizer_state_bytes_max_rank"] - z["optimizer_state_bytes_max_rank"])
        check(z["peak_bytes_max_rank"] <= p["peak_bytes_max_rank"] - saved // 2,
              f"{name}: peak {z['peak_bytes_max_rank']} with --zero 1 against {p['peak_bytes_max_rank']} "
              f"without (expected about {saved} bytes less)")
        print(f"{name}, 2 ranks on one GPU: --zero 1 == --zero 0 ({got}); fp32 weights {z['fp32_weight_bytes']} of "
              f"{p['fp32_weight_bytes']} bytes per rank; peak {z['peak_bytes_max_rank']} vs {p['peak_bytes_max_rank']}")
    base = GPU_NET + GPU_RECIPES["bf16 adam"] + ["--num-samples", "128", "--epochs", "2"]
    _, full = launch_run(a, tmp, n, base, "gfull", GPU_ENV)
    ref = agreed_checksum(full, n, "uninterrupted")
    for first, second in ((["--zero", "1"], []), ([], ["--zero", "1"])):
        ck = f"{tmp}/gck{len(first)}.safetensors"
        launch_run(a, tmp, n, base + first + ["--max-steps", "5", "--save", ck], f"gfirst{len(first)}", GPU_ENV)
        _, rest = launch_run(a, tmp, n, base + second + ["--resume", ck], f"grest{len(first)}", GPU_ENV)
        check("Resuming from" in rest, "the second run did not resume")
        got = agreed_checksum(rest, n, f"resumed {first} -> {second}")
        check(got == ref, f"saved with {first or 'no --zero'}, resumed with {second or 'no --zero'}: {got}, "
                          f"uninterrupted {ref}")
        print(f"GPU: saved with {' '.join(first) or '--zero 0'}, resumed with {' '.join(second) or '--zero 0'}: equal")
    for suffix in ("", ".train"):
        w0, _ = read_st(f"{tmp}/gck0{suffix}.safetensors")
        w1, _ = read_st(f"{tmp}/gck2{suffix}.safetensors")
        check(sorted(w0) == sorted(w1) and all(w0[k].tobytes() == w1[k].tobytes() for k in w0),
              f"the step-5 checkpoints{suffix} with and without --zero 1 differ")
    print("GPU: step-5 checkpoints with and without --zero 1 are identical")


if __name__ == "__main__":
    sys.exit(main(globals()))
