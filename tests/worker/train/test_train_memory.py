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
Exit 0 pass, 1 fail, 77 skipped (`launch` not built).

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


if __name__ == "__main__":
    sys.exit(main(globals()))
