#!/usr/bin/python3
"""Writes a small ImageFolder data set for the tests, or an ImageNet-like one for the benchmark.

  make_dataset.py OUT                 # tests: OUT/train/c0..c9 and OUT/val/c0..c9, mixed sizes,
                                      # JPEG (baseline, progressive, grayscale, CMYK), PNG (RGB,
                                      # palette, RGBA), and three bad files in train/c3
  make_dataset.py OUT --imagenet N    # benchmark: N JPEGs of ImageNet-like size (~500x375, quality
                                      # 90, ~100 KB) in OUT/train/c00..c09 and a few in OUT/val
  make_dataset.py OUT --imagenet N --photos DIR
                                      # the same layout from real photos: the JPEGs of DIR copied
                                      # round-robin until there are N files (byte for byte)
Prints one JSON line describing what it wrote (the bad files' relative paths among it).
"""
import argparse
import io
import json
import os

import numpy as np
from PIL import Image


def content(rng, w, h):
    """Smooth colour fields plus fine noise: both the low and the high frequencies matter to a resize."""
    gy, gx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        fx, fy, ph = rng.uniform(0.5, 6, 3)
        img[..., c] = 127 + 90 * np.sin(gx / w * fx * 2 * np.pi + ph) * np.cos(gy / h * fy * 2 * np.pi)
    img += rng.normal(0, 25, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def jpeg_bytes(im, **kw):
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def small(out, seed):
    rng = np.random.default_rng(seed)
    bad = []
    for split, per_class in (("train", 24), ("val", 4)):
        for c in range(10):
            d = os.path.join(out, split, f"c{c}")
            for i in range(per_class):
                w, h = int(rng.integers(24, 260)), int(rng.integers(24, 260))
                im = content(rng, w, h)
                kind = i % 6
                if kind == 5:
                    pal = im.convert("P", palette=Image.ADAPTIVE) if i % 12 == 5 else im
                    b = io.BytesIO()
                    pal.save(b, "PNG")
                    write(os.path.join(d, f"img{i:03d}.png"), b.getvalue())
                else:
                    sub = [0, 1, 2][kind % 3]  # 4:4:4, 4:2:2, 4:2:0
                    write(os.path.join(d, f"img{i:03d}.jpg"), jpeg_bytes(im, quality=int(rng.integers(60, 96)), subsampling=sub))
    t = os.path.join(out, "train")
    rgb = content(rng, 200, 150)
    write(os.path.join(t, "c1", "gray.jpg"), jpeg_bytes(rgb.convert("L"), quality=90))
    write(os.path.join(t, "c2", "cmyk.jpg"), jpeg_bytes(rgb.convert("CMYK"), quality=90))
    write(os.path.join(t, "c4", "progressive.JPEG"), jpeg_bytes(rgb, quality=85, progressive=True))
    b = io.BytesIO()
    rgba = rgb.convert("RGBA")
    rgba.putalpha(Image.fromarray(np.full((150, 200), 128, np.uint8)))
    rgba.save(b, "PNG")
    write(os.path.join(t, "c5", "alpha.png"), b.getvalue())
    # Bad files: not an image, a JPEG whose header is garbage, a JPEG cut short.
    write(os.path.join(t, "c3", "corrupt.jpg"), b"this is not an image\n" * 10)
    write(os.path.join(t, "c3", "badheader.jpg"), b"\xff\xd8\xff\xe0" + bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
    full = jpeg_bytes(rgb, quality=90)
    write(os.path.join(t, "c3", "truncated.jpg"), full[: len(full) * 6 // 10])
    bad = ["c3/badheader.jpg", "c3/corrupt.jpg", "c3/truncated.jpg"]
    return {"root": out, "bad": bad}


def imagenet(out, n, seed):
    """ImageNet-like JPEGs: 500x375 and nearby sizes (both orientations), quality 87, baseline 4:2:0."""
    rng = np.random.default_rng(seed)
    sizes = [(500, 375), (500, 333), (375, 500), (500, 400), (640, 480), (500, 500)]
    base = [content(rng, 640, 640) for _ in range(8)]
    total = 0
    for i in range(n):
        w, h = sizes[i % len(sizes)]
        im = base[i % len(base)].crop((i % 97, i % 89, i % 97 + min(w, 640 - 97), i % 89 + min(h, 640 - 89))).resize((w, h))
        data = jpeg_bytes(im, quality=87)
        total += len(data)
        split = "val" if (i // 10) % 50 == 49 else "train"
        write(os.path.join(out, split, f"c{i % 10:02d}", f"img{i:06d}.jpg"), data)
    return {"root": out, "images": n, "mean_bytes": total // max(n, 1)}


def photos(out, n, src):
    """N files laid out as imagenet() lays them out, copied round-robin from the JPEGs of src."""
    files = sorted(f for f in os.listdir(src) if f.lower().endswith((".jpg", ".jpeg")))
    if not files:
        raise SystemExit(f"make_dataset.py: --photos {src}: no .jpg/.jpeg files there")
    blobs = [open(os.path.join(src, f), "rb").read() for f in files]
    total = 0
    for i in range(n):
        data = blobs[i % len(blobs)]
        total += len(data)
        split = "val" if (i // 10) % 50 == 49 else "train"
        write(os.path.join(out, split, f"c{i % 10:02d}", f"img{i:06d}.jpg"), data)
    return {"root": out, "images": n, "distinct_photos": len(blobs), "mean_bytes": total // max(n, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--imagenet", type=int, default=0)
    ap.add_argument("--photos", metavar="DIR", help="with --imagenet: copy real JPEGs from DIR instead of drawing them")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--info", action="store_true", help="also write OUT/info.json (the tests' shared copy)")
    a = ap.parse_args()
    if a.photos and not a.imagenet:
        ap.error("--photos needs --imagenet N (how many files to write)")
    if a.photos:
        info = photos(a.out, a.imagenet, a.photos)
    else:
        info = imagenet(a.out, a.imagenet, a.seed) if a.imagenet else small(a.out, a.seed)
    if a.info:
        with open(os.path.join(a.out, "info.json"), "w") as f:
            json.dump(info, f)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
