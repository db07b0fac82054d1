#!/usr/bin/python3
"""train_resnet resumed at a new world size (issue 21, item 4), on the CPU under launch.

Usage: test_train_resize.py CASE --train PATH --launch PATH
Cases: resize (2 ranks -> 3 ranks -> 2 ranks, ZeRO-1, --lr-base-batch: every sample of every
epoch read exactly once across the changes, per rank 0's --log-samples; the start-up line names
the old and new world size; the learning rate follows the new global batch; the run finishes with
the ranks agreeing), midstep (a checkpoint whose position is not a multiple of the new global
batch: the epoch's tail that does not fill a batch is dropped, nothing read twice).
Exit 0 pass, 1 fail, 77 skipped (`launch` not built).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_train_resnet import SKIP, check, main, run  # noqa: E402

N = 48  # samples: 6 steps of global batch 8 (2 ranks x 4), 4 of 12 (3 ranks x 4)
NET = ["--depth", "18", "--width", "8", "--image-size", "32", "--num-classes", "10", "--batch-size", "4",
       "--num-samples", str(N), "--threads", "1", "--data", "learnable", "--epochs", "3", "--log-every", "1",
       "--optimizer", "adam", "--lr", "0.001", "--lr-base-batch", "8", "--zero", "1"]


def launch(a, tmp, n, args, name):
    log = os.path.join(tmp, "log-" + name)
    samples = os.path.join(tmp, name + ".samples.jsonl")
    metrics = os.path.join(tmp, name + ".metrics.jsonl")
    p = run([a.launch, "--devices", "cpu", "--nproc_per_node", str(n), "--log_dir", log, a.train] + NET + args +
            ["--log-samples", samples, "--metrics-file", metrics], timeout=170)
    out = open(os.path.join(log, "workerlog.0")).read()
    check(p.returncode == 0, f"{name}: {n} ranks exited {p.returncode}:\n{out[-2000:]}\n{p.stderr[-1500:]}")
    steps = [json.loads(l) for l in open(samples)]
    lrs = {j["step"]: j["lr"] for j in map(json.loads, open(metrics)) if "lr" in j}
    for s in steps:
        check(s["world"] == n and len(s["samples"]) == n, f"{name}: a step logged with {s['world']} ranks")
    return out, steps, lrs


def seen_per_epoch(*runs):
    per = {}
    for steps in runs:
        for s in steps:
            for rank in s["samples"]:
                per.setdefault(s["epoch"], []).extend(i for i in rank if i >= 0)
    return per


def case_resize(a, tmp):
    if not os.path.exists(a.launch):
        print(f"SKIP: {a.launch} not built")
        return SKIP
    ck = os.path.join(tmp, "ck.safetensors")
    # 2 ranks: 3 of epoch 0's 6 steps (its samples 0..23 of the permutation).
    out_a, a_steps, a_lr = launch(a, tmp, 2, ["--save", ck, "--max-steps", "3"], "two")
    # 3 ranks: epoch 0 continues at sample 24 (2 steps of 12), then 2 of epoch 1's 4 steps.
    out_b, b_steps, b_lr = launch(a, tmp, 3, ["--save", ck, "--resume", ck, "--max-steps", "7"], "three")
    want = ("Resuming from " + ck + " at step 3 on 3 rank(s) x batch 4 x 1, saved on 2 rank(s): global batch 12 "
            "(was 8); kept the weights, the optimizer state (ZeRO-1: re-partitioned over 3 ranks), the step count "
            "and the data position: epoch 0 continues at its sample 24 of 48, 2 step(s) left in it; lr 0.0015")
    check(want in out_b, f"3 ranks: the start-up line is not\n{want}\n{out_b[:2500]}")
    # 2 ranks again: epoch 1 continues at sample 24 (3 steps of 8), then all of epoch 2.
    out_c, c_steps, c_lr = launch(a, tmp, 2, ["--save", ck, "--resume", ck], "two-again")
    check("saved on 3 rank(s): global batch 8 (was 12)" in out_c and "epoch 1 continues at its sample 24 of 48" in out_c,
          f"2 ranks again: {out_c[:2500]}")
    check("Checksums: all 2 rank(s) agree" in out_c and re.search(r"Summary: 9 steps", out_c),
          f"the last run did not finish (3 + 4 + 9 = 16 steps): {out_c[-1500:]}")
    check([s["step"] for s in a_steps + b_steps + c_steps] == list(range(16)), "the steps are not 0..15 once each")
    per = seen_per_epoch(a_steps, b_steps, c_steps)
    check(sorted(per) == [0, 1, 2], f"epochs logged: {sorted(per)}")
    for e, idx in sorted(per.items()):
        check(sorted(idx) == list(range(N)), f"epoch {e}: {len(idx)} samples read, {len(set(idx))} distinct "
                                             f"(want each of 0..{N - 1} once): {sorted(idx)}")
    # The learning rate follows the global batch: --lr 0.001 per 8 images.
    check(all(abs(v - 0.001) < 1e-12 for v in a_lr.values()) and all(abs(v - 0.001) < 1e-12 for v in c_lr.values()),
          f"2-rank learning rates: {a_lr} {c_lr}")
    check(all(abs(v - 0.0015) < 1e-12 for v in b_lr.values()) and b_lr, f"3-rank learning rates: {b_lr}")
    print(f"resize: 2 -> 3 -> 2 ranks (ZeRO-1): {len(a_steps)} + {len(b_steps)} + {len(c_steps)} steps, every "
          f"sample of epochs 0, 1, 2 read once; lr 0.001 / 0.0015 / 0.001 for global batches 8 / 12 / 8; checksums agree")


def case_midstep(a, tmp):
    if not os.path.exists(a.launch):
        print(f"SKIP: {a.launch} not built")
        return SKIP
    ck = os.path.join(tmp, "ck.safetensors")
    # 3 ranks, 1 step (samples 0..11); then 2 ranks x batch 4 x 2 accumulation steps (global 16):
    # 36 samples left, 2 whole steps (12..43), the last 4 dropped; then epoch 1 whole.
    _, first, _ = launch(a, tmp, 3, ["--save", ck, "--max-steps", "1", "--epochs", "2"], "first")
    out, rest, _ = launch(a, tmp, 2, ["--resume", ck, "--accum-steps", "2", "--epochs", "2"], "rest")
    check("epoch 0 continues at its sample 12 of 48, 2 step(s) left in it (its last 4 sample(s) dropped)" in out, out[:2500])
    per = seen_per_epoch(first, rest)
    check(len(per[0]) == 44 and len(set(per[0])) == 44, f"epoch 0: {len(per[0])} reads, {len(set(per[0]))} distinct")
    check(sorted(per[1]) == list(range(N)), f"epoch 1: {sorted(per[1])}")
    print("midstep: 3 ranks x 4 -> 2 ranks x 4 x 2 micro-batches from sample 12: 44 distinct samples in epoch 0 "
          "(its 4-sample tail dropped), epoch 1 whole")


if __name__ == "__main__":
    sys.exit(main(globals()))
