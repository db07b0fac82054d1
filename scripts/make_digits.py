#!/usr/bin/python3
"""Writes scikit-learn's bundled handwritten digits (load_digits: 1,797 8x8 grey images, 10
classes, shipped inside Debian's python3-sklearn: nothing is downloaded) as an ImageFolder of
32x32 RGB PNGs (bilinear upsampling), split 80/20 per class with a fixed seed: DIR/train/<digit>/
(1,438 images) and DIR/VAL/<digit>/ (359). The quick start's small-image example and the
convergence test (tests/worker/train/test_convergence.py) train on it.

  scripts/make_digits.py DIR [--val-name test]
"""
import argparse
import os
import sys


def write_digits(root, val_name="val"):
    """The digits as root/{train,VAL}/<digit>/<n>.png; returns (train, val) counts."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    d = load_digits()
    rng = np.random.RandomState(0)
    counts = [0, 0]
    for cls in range(10):
        idx = rng.permutation(np.flatnonzero(d.target == cls))
        cut = int(round(0.8 * len(idx)))
        for split, part in (("train", idx[:cut]), (val_name, idx[cut:])):
            folder = os.path.join(root, split, str(cls))
            os.makedirs(folder, exist_ok=True)
            for i in part:
                grey = (d.images[i] / 16.0 * 255.0).round().astype(np.uint8)
                Image.fromarray(grey).resize((32, 32), Image.BILINEAR).convert("RGB").save(
                    os.path.join(folder, f"{i}.png"))
            counts[split != "train"] += len(part)
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--val-name", default="val", help="the validation folder's name (val, validation or test)")
    a = ap.parse_args()
    try:
        ntrain, nval = write_digits(a.dir, a.val_name)
    except ImportError as e:
        raise SystemExit(f"make_digits: {e} (apt-get install python3-sklearn python3-pil)")
    print(f"make_digits: {a.dir}: {ntrain} training images in train/, {nval} in {a.val_name}/ (10 classes, 32x32 PNG)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
