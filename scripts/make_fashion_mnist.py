#!/usr/bin/python3
"""Writes Fashion-MNIST (Zalando's 70,000 28x28 grey photos of clothing in 10 classes, shipped by
Debian's dataset-fashion-mnist package: nothing is downloaded) as an ImageFolder of PNGs:
DIR/train/<class>/<n>.png (the 60,000 training images) and DIR/val/<class>/<n>.png (the 10,000
test images). The GPU convergence comparison of fp16 and bf16 (scripts/gpu_convergence.sh)
trains on it.

  scripts/make_fashion_mnist.py DIR [--from /usr/share/datasets/fashion-mnist] [--val-name val]

--from names the folder of the four idx files (train-images-idx3-ubyte.gz, ...), e.g. a copy
carried to a machine without the package.
"""
import argparse
import gzip
import os
import shutil
import struct
import sys
from concurrent.futures import ProcessPoolExecutor

CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
           "ankle-boot"]
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def read_idx(path, magic, dims):
    """The array of an idx file (big-endian header: magic, then `dims` sizes)."""
    import numpy as np
    with gzip.open(path, "rb") as f:
        data = f.read()
    head = struct.unpack(">" + "I" * (1 + dims), data[:4 * (1 + dims)])
    if head[0] != magic:
        raise ValueError(f"{path}: magic {head[0]:#x}, expected {magic:#x}: not an idx file of this kind")
    shape = head[1:]
    body = np.frombuffer(data, dtype=np.uint8, offset=4 * (1 + dims))
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {body.size} bytes of data for shape {shape}: truncated")
    return body.reshape(shape)


def write_part(args):
    folder, images, labels, first = args
    from PIL import Image
    for k, (img, lab) in enumerate(zip(images, labels)):
        Image.fromarray(img).save(os.path.join(folder, CLASSES[lab], f"{first + k}.png"))
    return len(images)


def write_split(src, root, split, name, jobs):
    images = read_idx(os.path.join(src, FILES[split][0]), 0x803, 3)
    labels = read_idx(os.path.join(src, FILES[split][1]), 0x801, 1)
    if len(images) != len(labels) or labels.max() >= len(CLASSES):
        raise ValueError(f"{src}: {len(images)} {split} images against {len(labels)} labels")
    folder = os.path.join(root, name)
    for c in CLASSES:
        os.makedirs(os.path.join(folder, c), exist_ok=True)
    step = 2000
    parts = [(folder, images[i:i + step], labels[i:i + step], i) for i in range(0, len(images), step)]
    with ProcessPoolExecutor(max_workers=jobs) as ex:
        return sum(ex.map(write_part, parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--from", dest="src", default="/usr/share/datasets/fashion-mnist",
                    help="the folder of the four idx files (default: Debian's dataset-fashion-mnist)")
    ap.add_argument("--val-name", default="val", help="the validation folder's name (val, validation or test)")
    a = ap.parse_args()
    missing = [f for pair in FILES.values() for f in pair if not os.path.isfile(os.path.join(a.src, f))]
    if missing:
        raise SystemExit(f"make_fashion_mnist: {a.src} lacks {', '.join(missing)} "
                         "(apt-get install dataset-fashion-mnist, or give --from DIR)")
    if os.path.exists(a.dir) and os.listdir(a.dir):
        raise SystemExit(f"make_fashion_mnist: {a.dir} is not empty: give a new folder")
    # Written under DIR.part, then renamed: an interrupted run leaves no half-made DIR.
    part = os.path.normpath(a.dir) + ".part"
    shutil.rmtree(part, ignore_errors=True)
    try:
        jobs = os.cpu_count() or 1
        ntrain = write_split(a.src, part, "train", "train", jobs)
        nval = write_split(a.src, part, "test", a.val_name, jobs)
    except ImportError as e:
        raise SystemExit(f"make_fashion_mnist: {e} (apt-get install python3-numpy python3-pil)")
    except ValueError as e:
        shutil.rmtree(part, ignore_errors=True)
        raise SystemExit(f"make_fashion_mnist: {e}")
    if os.path.isdir(a.dir):
        os.rmdir(a.dir)  # empty (checked above)
    os.rename(part, a.dir)
    print(f"make_fashion_mnist: {a.dir}: {ntrain} training images in train/, {nval} in {a.val_name}/ "
          "(10 classes, 28x28 grey PNG)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
