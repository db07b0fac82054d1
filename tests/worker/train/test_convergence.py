#!/usr/bin/python3
"""The convergence proof of issue 12: train_resnet reaches a real accuracy on real images.

The images: scikit-learn's bundled handwritten digits (load_digits: 1,797 8x8 grey images, 10
classes, shipped inside the Debian package python3-sklearn), written here as an ImageFolder of
32x32 RGB PNGs (bilinear upsampling), split 80/20 with a fixed seed, per class (stratified:
1,438 training and 359 validation images).

The recipe: ResNet-18 at width 16, 32x32, SGD with Nesterov momentum 0.9, lr 0.1 for the global
batch of 64 (--lr-base-batch 64), cosine schedule with one warm-up epoch, label smoothing 0.1,
weight decay 5e-4 off batch-norm and biases, --augment none (digits are orientation-sensitive:
no flips or crops), EPOCHS epochs.

  1. 2 CPU ranks x batch 32 under `launch`: the final validation top-1 must reach THRESHOLD.
  2. 1 rank x batch 64 (the same global batch): its top-1 within one point of run 1's.
  3. --recipe small-images (issue 25: the cifar stem, pad-crop + flip, its schedule and optimizer)
     at this test's budget (--width 16 --batch-size 32 --epochs EPOCHS, no flips, 2 ranks): at least run 1's
     top-1 less one point (the recipe in full, width 32, 30 epochs: see README, "Quick start").

Why 95 %: a small CNN separates these digits at 98-99 % (scikit-learn's own SVM example reaches
~97 % on a 50/50 split of the same 8x8 images); the same model and recipe in PyTorch reached
98-99.7 % from epoch 3 on, and train_resnet (on a trial merge with the image loader, 2026-12-01)
98.05 % on 2 ranks and 97.77 % on 1 rank, above 95 % from epoch 2 on. 95 % leaves room for the seed's
run-to-run variation (one validation image is 0.28 points) while any real defect - a wrong
gradient, a label off by one, a broken schedule or evaluation - lands far below (chance is 10 %).

Usage: test_convergence.py --train PATH --launch PATH [--keep DIR]
Exit 0 pass, 1 fail, 77 skipped (no scikit-learn/PIL, or a train_resnet without the image
loader of issue 11).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
EPOCHS = 10
THRESHOLD = 95.0
POINT = 1.0
RECIPE = ["--depth", "18", "--width", "16", "--image-size", "32", "--augment", "none",
          "--optimizer", "sgd", "--momentum", "0.9", "--nesterov", "--lr", "0.1", "--lr-base-batch", "64",
          "--lr-schedule", "cosine", "--warmup-epochs", "1", "--label-smoothing", "0.1",
          "--weight-decay", "5e-4", "--no-wd-on-bn-bias", "--epochs", str(EPOCHS), "--seed", "1",
          "--log-every", "10", "--threads", "1"]


# The recipe's flip is off (--hflip 0) for digits, which a mirror changes (a mirrored 2 is no 2): with
# it, 97.49 % against run 1's 98.33 % in one run (2026-12-01).
SMALL_IMAGES = ["--recipe", "small-images", "--width", "16", "--batch-size", "32", "--epochs", str(EPOCHS),
                "--hflip", "0", "--seed", "1", "--log-every", "10", "--threads", "1"]

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts"))
from make_digits import write_digits  # noqa: E402  (the quick start's data set too)


def final_top1(metrics):
    with open(metrics) as f:
        evals = [r for r in map(json.loads, f) if r.get("eval")]
    if not evals:
        raise SystemExit(f"FAILED: no validation record in {metrics}")
    return evals[-1]


def train(cmd, timeout):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    if p.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--launch", required=True)
    ap.add_argument("--keep", help="keep the data, logs and metrics in this folder")
    a = ap.parse_args()
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
        import sklearn  # noqa: F401
    except ImportError as e:
        print(f"SKIPPED: {e} (scripts/setup.sh installs python3-sklearn and python3-pil)")
        return SKIP
    helptext = subprocess.run([a.train, "--help"], capture_output=True, text=True).stdout
    if "--augment" not in helptext or "--val-samples" not in helptext:
        print("SKIPPED: this train_resnet lacks the image loader (issue 11) or validation (issue 12)")
        return SKIP
    work = a.keep or tempfile.mkdtemp(prefix="train_convergence_")
    os.makedirs(work, exist_ok=True)
    try:
        data = os.path.join(work, "digits")
        shutil.rmtree(data, ignore_errors=True)
        ntrain, nval = write_digits(data)
        print(f"digits ImageFolder: {ntrain} training, {nval} validation images (32x32 PNG)")

        m2, m1 = os.path.join(work, "two_ranks.jsonl"), os.path.join(work, "one_rank.jsonl")
        out2, t2 = train([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", os.path.join(work, "log"),
                          a.train, "--data", data, "--batch-size", "32", "--metrics-file", m2] + RECIPE, 600)
        r2 = final_top1(m2)
        print(f"2 ranks x 32: top-1 {r2['top1']:.2f} %, top-5 {r2['top5']:.2f} %, loss {r2['val_loss']:.4f} "
              f"over {r2['val_images']} images ({t2:.0f} s)")
        if r2["val_images"] != nval:
            raise SystemExit(f"FAILED: evaluated {r2['val_images']} images, the split has {nval}")
        if r2["top1"] < THRESHOLD:
            raise SystemExit(f"FAILED: validation top-1 {r2['top1']:.2f} % < {THRESHOLD} %\n{out2[-3000:]}")
        if not re.search(r"Summary: .*validation top-1 best", out2):
            raise SystemExit("FAILED: no summary line")

        out1, t1 = train([a.train, "--data", data, "--batch-size", "64", "--metrics-file", m1] + RECIPE, 600)
        r1 = final_top1(m1)
        print(f"1 rank x 64:  top-1 {r1['top1']:.2f} %, top-5 {r1['top5']:.2f} %, loss {r1['val_loss']:.4f} ({t1:.0f} s)")
        if abs(r1["top1"] - r2["top1"]) > POINT:
            raise SystemExit(f"FAILED: 1 rank x 64 reached {r1['top1']:.2f} %, 2 ranks x 32 {r2['top1']:.2f} %: "
                             f"more than {POINT} point apart")
        m3 = os.path.join(work, "small_images.jsonl")
        _, t3 = train([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", os.path.join(work, "log3"),
                       a.train, "--data", data, "--metrics-file", m3] + SMALL_IMAGES, 600)
        r3 = final_top1(m3)
        print(f"--recipe small-images (width 16, 2 x 32, {EPOCHS} epochs): top-1 {r3['top1']:.2f} %, top-5 "
              f"{r3['top5']:.2f} %, loss {r3['val_loss']:.4f} ({t3:.0f} s)")
        if r3["top1"] < r2["top1"] - POINT:
            raise SystemExit(f"FAILED: --recipe small-images reached {r3['top1']:.2f} %, the recipe of run 1 "
                             f"{r2['top1']:.2f} %: more than {POINT} point below")
        print("convergence: passed")
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
