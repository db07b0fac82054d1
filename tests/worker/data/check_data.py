#!/usr/bin/python3
"""Checks of the image pipeline against Pillow, torchvision and torch (Debian's python3-torch).

Usage: check_data.py CASE --driver data_driver --train train_resnet --launch launch
Cases:
  index       our ImageFolder index == torchvision.datasets.ImageFolder's samples and classes
  decode      decoded pixels == Pillow's (same libjpeg-turbo): full size, DCT-scaled (Pillow's draft
              mode), grayscale, CMYK, progressive, PNG (RGB, palette, alpha dropped)
  transforms  the same crop box and flip through ours and torchvision: equal to torch's antialiased
              interpolate (float64) up to float32 rounding, to Pillow's within its 8-bit rounding
  sampler     the shards of our sampler == torch's DistributedSampler over the same permutation
  batch       one micro-batch of the CPU loader == the per-sample transform; a bad file's place taken
  errors      bad --data: one line, exit 2, before any training
  skip        bad files (decompression bombs among them) skipped with one warning each and counted;
              --strict-data stops the run
  special     list-file entries that are not image files (a FIFO, a socket, a device, a 2 GB sparse
              non-image, a 64 GB sparse "JPEG", one over --max-image-bytes): each skipped with one
              warning naming it and why, none read (peak memory), no hang; --strict-data names the FIFO
  resume      a resumed run on images == the uninterrupted run, bit for bit
  launch      launch --devices cpu --nproc_per_node 2 train_resnet --data DIR trains
Exit 0 pass, 1 fail, 77 skip (`launch` not built yet).
"""
import argparse
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import st  # noqa: E402

SKIP = 77
ARGS = None
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])
SMALL = ["--depth", "18", "--width", "8", "--image-size", "32", "--batch-size", "8", "--threads", "1",
         "--data-threads", "2"]


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "LAUNCH_", "FLAGS_"))}
    e["OMP_NUM_THREADS"] = "1"
    return e


def run(cmd, timeout=150):
    return subprocess.run([str(c) for c in cmd], env=env(), capture_output=True, text=True, timeout=timeout)


def ok(cmd, timeout=150):
    p = run(cmd, timeout)
    check(p.returncode == 0, f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def make_dataset(tmp):
    """The generated data set: a copy of --dataset (made once by the ctest fixture), else a new one."""
    out = os.path.join(tmp, "ds")
    if ARGS.dataset and os.path.exists(os.path.join(ARGS.dataset, "info.json")):
        shutil.copytree(ARGS.dataset, out, ignore=shutil.ignore_patterns(".train_resnet-index.*"))
        info = json.load(open(os.path.join(out, "info.json")))
        os.remove(os.path.join(out, "info.json"))
    else:
        info = json.loads(ok([sys.executable, os.path.join(HERE, "make_dataset.py"), out]).stdout)
    info["root"] = out
    return info


def good_images(root):
    bad = {"corrupt.jpg", "badheader.jpg", "truncated.jpg"}
    for dp, _, fs in sorted(os.walk(os.path.join(root, "train"))):
        for f in sorted(fs):
            if f not in bad:
                yield os.path.join(dp, f)


# --- index
def case_index(a, tmp):
    from torchvision.datasets import ImageFolder
    ds = make_dataset(tmp)
    train = os.path.join(ds["root"], "train")
    lines = ok([a.driver, "index", train]).stdout.splitlines()
    ours = [(l.split("\t")[1], int(l.split("\t")[0])) for l in lines[:-1]]
    classes = lines[-1].split("\t")[1:]
    ref = ImageFolder(train, loader=lambda p: None)
    theirs = [(os.path.relpath(p, train), c) for p, c in ref.samples]
    check(classes == ref.classes, f"classes {classes} != torchvision's {ref.classes}")
    if ours != theirs:
        first = next((i for i, (o, t) in enumerate(zip(ours, theirs)) if o != t), min(len(ours), len(theirs)))
        raise Failure(f"samples differ from torchvision's ImageFolder at {first}: "
                      f"{ours[first:first + 2]} vs {theirs[first:first + 2]} ({len(ours)} vs {len(theirs)} samples)")
    print(f"index: {len(ours)} samples, {len(classes)} classes, same order and labels as torchvision's ImageFolder")


# --- decode
def decode_ours(a, paths, scale, tmp):
    out = os.path.join(tmp, "dec.safetensors")
    ok([a.driver, "decode", scale, out, *paths])
    d = st.load(out)
    return [d[str(i)] for i in range(len(paths))]


def case_decode(a, tmp):
    from PIL import Image
    ds = make_dataset(tmp)
    paths = list(good_images(ds["root"]))
    ours = decode_ours(a, paths, 8, tmp)
    for path, o in zip(paths, ours):
        im = Image.open(path)
        ref = np.asarray(im.convert("RGB"))
        check(o.shape == ref.shape, f"{path}: shape {o.shape} != Pillow's {ref.shape}")
        diff = np.abs(o.astype(int) - ref.astype(int)).max()
        check(diff == 0, f"{path} ({im.mode}): max |ours - Pillow| = {diff} levels (same libjpeg-turbo/libpng: must be 0)")
    # DCT scaling against Pillow's draft mode (libjpeg's scaled IDCT at 1/2, 1/4, 1/8).
    jpegs = [p for p in paths[::3] if Image.open(p).format == "JPEG" and Image.open(p).mode == "RGB"]
    drafts = 0
    for scale in (4, 2, 1):
        mine = decode_ours(a, jpegs, scale, tmp)
        for path, o2 in zip(jpegs, mine):
            im2 = Image.open(path)
            W, H = im2.size
            im2.draft("RGB", (max(1, W * scale // 8), max(1, H * scale // 8)))
            if im2.size != ((W * scale + 7) // 8, (H * scale + 7) // 8):
                continue  # Pillow picked another scale for this size
            r2 = np.asarray(im2.convert("RGB"))
            check(o2.shape == r2.shape and (o2 == r2).all(), f"{path} at {scale}/8: differs from Pillow's draft decode")
            drafts += 1
    for special in ("c1/gray.jpg", "c2/cmyk.jpg", "c4/progressive.JPEG", "c5/alpha.png"):
        check(os.path.join(ds["root"], "train", special) in paths, f"missing {special}")
    check(drafts >= 10, f"only {drafts} DCT-scaled decodes were compared")
    print(f"decode: {len(paths)} files (JPEG 4:4:4/4:2:2/4:2:0, grayscale, CMYK, progressive; PNG RGB/palette/RGBA) "
          f"equal Pillow's pixels exactly; {drafts} DCT-scaled decodes equal Pillow's draft mode")


# --- transforms
def render_ours(a, jobs, tmp):
    """jobs: (path, size, dct, box or None for eval, flip) -> (images, DCT scales)."""
    out = os.path.join(tmp, "r.safetensors")
    args = []
    for path, size, dct, box, flip in jobs:
        f = [path, size, "on" if dct else "off"] + (list(box) + [1 if flip else 0] if box is not None else ["eval"])
        args.append("|".join(map(str, f)))
    ok([a.driver, "render", out, *args])
    d, m = st.load(out), meta(out)
    return [d[str(i)].astype(np.float64) for i in range(len(jobs))], [int(m[f"scale_num_{i}"]) for i in range(len(jobs))]


def meta(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)).get("__metadata__", {})


def float32_bound(box_len, out_len):
    """|float32 - float64| of one output value of the separable filter, in 0..255 units: each of the
    kx + ky products and sums rounds once (relative 2^-24 of at most 255), the weights too."""
    s = max(box_len[0] / out_len, 1.0), max(box_len[1] / out_len, 1.0)
    taps = sum(2 * np.ceil(v) + 1 for v in s)
    return 4 * taps * 255 * 2.0 ** -24


def case_transforms(a, tmp):
    import torch
    import torch.nn.functional as F
    import torchvision.transforms as T
    import torchvision.transforms.functional as TF
    from PIL import Image
    ds = make_dataset(tmp)
    rng = np.random.default_rng(1)
    worst_torch, worst_pil, pil_vs_torch, n = 0.0, 0.0, 0.0, 0
    norm = lambda x: (x / 255.0 - MEAN) / STD  # noqa: E731
    cases = []  # (job, torch float64 reference, torchvision PIL result, float32 bound)
    for k, path in enumerate(list(good_images(ds["root"]))[::4]):
        im = Image.open(path).convert("RGB")
        W, H = im.size
        size = int(rng.choice([16, 32, 56]))
        if k % 5 == 4:  # evaluation: Resize(round(size * 256 / 224)) + CenterCrop(size)
            box, flip = None, False
            r = max(size, int(round(size * 256 / 224)))
            pil = T.Compose([T.Resize(r, interpolation=T.InterpolationMode.BILINEAR), T.CenterCrop(size)])(im)
            x = torch.from_numpy(np.array(im)).permute(2, 0, 1)[None].double()
            nh, nw = (int(r * H / W), r) if W <= H else (r, int(r * W / H))
            y = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False, antialias=True)
            t, l = int(round((nh - size) / 2.0)), int(round((nw - size) / 2.0))
            ref64 = y[0, :, t:t + size, l:l + size].permute(1, 2, 0).numpy()
            bound = float32_bound((W, H), r)
        else:
            h, w = int(rng.integers(1, H + 1)), int(rng.integers(1, W + 1))
            top, left = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
            box, flip = (top, left, h, w), bool(rng.integers(0, 2))
            pil = TF.resized_crop(im, top, left, h, w, [size, size], interpolation=T.InterpolationMode.BILINEAR)
            if flip:
                pil = TF.hflip(pil)
            x = torch.from_numpy(np.asarray(im)[top:top + h, left:left + w].copy()).permute(2, 0, 1)[None].double()
            y = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
            if flip:
                y = y.flip(-1)
            ref64 = y[0].permute(1, 2, 0).numpy()
            bound = float32_bound((w, h), size)
        cases.append(((path, size, False, box, flip), ref64, pil, bound))
    rendered, _ = render_ours(a, [c[0] for c in cases], tmp)
    for ((path, size, _, box, flip), ref64, pil, bound), ours in zip(cases, rendered):
        # (1) torch's antialiased bilinear in float64: ours may differ by float32 rounding only.
        d_torch = np.abs(ours - norm(ref64)).max()
        check(d_torch <= bound / 255 / STD.min(), f"{path} box {box} flip {flip} size {size}: |ours - torch AA| = {d_torch:.3g} "
              f"> float32 bound {bound / 255 / STD.min():.3g}")
        # (2) torchvision on the PIL image (what ImageFolder pipelines run): Pillow rounds to 8 bits after
        # the horizontal pass (<= 0.5 level, carried through weights that sum to 1) and at the end
        # (<= 0.5): at most 1 level, plus its 22-bit fixed-point weights.
        ref_pil = norm(np.asarray(pil).astype(np.float64))
        d_pil = np.abs(ours - ref_pil).max()
        lim = (1.0 + 1e-3) / 255 / STD.min()
        check(d_pil <= lim, f"{path} box {box} size {size}: |ours - torchvision(PIL)| = {d_pil * 255 * STD.min():.3f} levels > 1")
        pil_vs_torch = max(pil_vs_torch, np.abs(ref_pil - norm(ref64)).max())
        worst_torch, worst_pil, n = max(worst_torch, d_torch), max(worst_pil, d_pil), n + 1
    # DCT scaling: a crop at least twice the output, decoded at 1/2 by libjpeg, against Pillow's draft
    # decode at the same scale resized over the same (fractional) box, cropped as ours clips the taps.
    checked = 0
    big = [p for p in good_images(ds["root"]) if Image.open(p).format == "JPEG" and Image.open(p).mode == "RGB"
           and min(Image.open(p).size) >= 128]
    jobs = [(p, 32, True, (3, 5, Image.open(p).size[1] - 7, Image.open(p).size[0] - 9), False) for p in big]
    rendered, scales = render_ours(a, jobs, tmp)
    for (path, size, _, box, _), ours, scale in zip(jobs, rendered, scales):
        W, H = Image.open(path).size
        check(scale < 8, f"{path}: a {box[3]}x{box[2]} crop to {size} was not DCT-scaled")
        im2 = Image.open(path)
        im2.draft("RGB", (W * scale // 8, H * scale // 8))
        if im2.size != ((W * scale + 7) // 8, (H * scale + 7) // 8):
            continue  # Pillow picked another scale for this size
        f = scale / 8
        t, l, h, w = box
        fx0, fy0, fx1, fy1 = l * f, t * f, (l + w) * f, (t + h) * f
        ix0, iy0 = int(np.floor(fx0)), int(np.floor(fy0))
        ix1, iy1 = min(im2.size[0], int(np.ceil(fx1))), min(im2.size[1], int(np.ceil(fy1)))
        region = im2.convert("RGB").crop((ix0, iy0, ix1, iy1))
        ref = region.resize((size, size), Image.BILINEAR, box=(fx0 - ix0, fy0 - iy0, fx1 - ix0, fy1 - iy0))
        d = np.abs(ours - norm(np.asarray(ref).astype(np.float64))).max()
        check(d <= (1.0 + 1e-3) / 255 / STD.min(), f"{path}: DCT-scaled crop differs from Pillow's draft + resize by "
              f"{d * 255 * STD.min():.3f} levels > 1")
        checked += 1
    check(checked >= 3, f"only {checked} images were large enough for the DCT-scaling check")
    print(f"transforms: {n} crops/evals; max |ours - torch AA float64| = {worst_torch:.2e}, "
          f"max |ours - torchvision(PIL)| = {worst_pil * 255 * STD.min():.3f} levels "
          f"(PIL vs torch AA itself: {pil_vs_torch * 255 * STD.min():.3f}); DCT-scaled: {checked} crops within 1 level of "
          "Pillow's draft mode")


def case_padcrop(a, tmp):
    """--augment pad-crop (issue 25) against torchvision: for a given box, RandomCrop(size, padding,
    pad_if_needed=True)'s pixels are F.pad (fill 0) + crop + hflip of the image; the evaluation is
    CenterCrop(size). Ours equals them up to float32 rounding of the normalisation. Then the boxes
    plan_train draws cover every position of the padded image, and the flip is a coin."""
    import torch
    import torchvision.transforms as T
    import torchvision.transforms.functional as TF
    from PIL import Image
    ds = make_dataset(tmp)
    rng = np.random.default_rng(5)
    to_norm = T.Compose([T.ToTensor(), T.Normalize(MEAN.tolist(), STD.tolist())])
    jobs, refs = [], []
    for k, path in enumerate(list(good_images(ds["root"]))[::3]):
        im = Image.open(path).convert("RGB")
        W, H = im.size
        size, pad = int(rng.choice([16, 32, min(W, H) + 12])), int(rng.choice([0, 2, 4]))
        x = TF.pad(TF.pil_to_tensor(im), pad, fill=0)  # (3, H + 2 pad, W + 2 pad), uint8
        if x.shape[2] < size:  # torchvision's pad_if_needed: the difference on both sides
            x = TF.pad(x, [size - x.shape[2], 0], fill=0)
        if x.shape[1] < size:
            x = TF.pad(x, [0, size - x.shape[1]], fill=0)
        if k % 4 == 3:
            jobs.append((path, size, "padcrop", pad, "eval"))
            ref = T.CenterCrop(size)(im)
        else:
            top, left = int(rng.integers(0, x.shape[1] - size + 1)), int(rng.integers(0, x.shape[2] - size + 1))
            flip = bool(rng.integers(0, 2))
            jobs.append((path, size, "padcrop", pad, top, left, int(flip)))
            ref = TF.crop(x, top, left, size, size)
            if flip:
                ref = TF.hflip(ref)
            ref = TF.to_pil_image(ref)
        refs.append(to_norm(ref).permute(1, 2, 0).double().numpy())
    out = os.path.join(tmp, "p.safetensors")
    ok([a.driver, "render", out, *["|".join(map(str, j)) for j in jobs]])
    got = st.load(out)
    worst = 0.0
    for i, (job, ref) in enumerate(zip(jobs, refs)):
        d = np.abs(got[str(i)].astype(np.float64) - ref).max()
        # ours: v * (1 / (255 std)) + (-mean / std) in float32, torch: (v / 255 - mean) / std: a few ulps of 2.6
        check(d <= 1e-5, f"{job}: |ours - torchvision| = {d:.3g} > 1e-5")
        worst = max(worst, d)
    # The drawn boxes: every top and left of the padded 10x12 image's 8x8 crops (padding 2), flips ~1/2.
    seen, flips = set(), 0
    for line in ok([a.driver, "plan", 10, 12, 7, 1, 0, 8, 2, 600]).stdout.splitlines():
        top, left, flip = map(int, line.split())
        seen.add((top, left))
        flips += flip
    want = {(t, l) for t in range(-2, 12 + 4 - 8 - 2 + 1) for l in range(-2, 10 + 4 - 8 - 2 + 1)}
    check(seen == want, f"pad-crop windows drawn {sorted(seen)} != every position {sorted(want)}")
    check(240 <= flips <= 360, f"{flips} of 600 pad-crop samples flipped (p = 0.5)")
    print(f"pad-crop: {len(jobs)} crops/center crops equal torchvision's to {worst:.2e}; "
          f"{len(want)} window positions all drawn, {flips}/600 flipped")


# --- sampler
def case_sampler(a, tmp):
    from torch.utils.data.distributed import DistributedSampler
    for n, world, accum, batch in ((247, 2, 1, 8), (100, 3, 1, 4), (101, 2, 2, 5), (7, 4, 1, 1)):
        out = json.loads(ok([a.driver, "shard", n, world, accum, batch, 5, 3]).stdout)
        perm = out["perm"]
        check(sorted(perm) == list(range(n)), "the permutation is not one")
        replicas = world * accum
        for r in range(world):
            got = out["batches"][r]
            for k in range(accum):
                # torch's DistributedSampler over our permutation (shuffle=False keeps its order).
                ds = DistributedSampler(perm, num_replicas=replicas, rank=r * accum + k, shuffle=False, drop_last=False)
                ref = [perm[i] for i in ds]
                steps = len(ref) // batch
                mine = [x for j, b in enumerate(got) if j % accum == k for x in b]
                check(mine == ref[:steps * batch], f"n={n} world={world} accum={accum}: rank {r} micro {k} differs "
                      f"from DistributedSampler: {mine[:10]} vs {ref[:10]}")
        p2 = json.loads(ok([a.driver, "shard", n, world, accum, batch, 5, 3]).stdout)["perm"]
        p3 = json.loads(ok([a.driver, "shard", n, world, accum, batch, 5, 4]).stdout)["perm"]
        check(p2 == perm and p3 != perm, "the permutation is not a function of (seed, epoch) alone")
    print("sampler: shards, padding and order equal torch's DistributedSampler over the same permutation")


# --- batch
def case_batch(a, tmp):
    ds = make_dataset(tmp)
    train = os.path.join(ds["root"], "train")
    lines = ok([a.driver, "index", train]).stdout.splitlines()[:-1]
    paths = [os.path.join(train, l.split("\t")[1]) for l in lines]
    labels = [int(l.split("\t")[0]) for l in lines]
    bad = [paths.index(os.path.join(train, b)) for b in ds["bad"]]
    good = [i for i in range(len(paths)) if i not in bad]
    idx = [good[3], bad[0], good[40], good[100], bad[1], good[7]]
    out = os.path.join(tmp, "batch.safetensors")
    ok([a.driver, "batch", ds["root"], "train", 32, 3, 11, 2, out, ",".join(map(str, idx))])
    b = st.load(out)
    for pos, i in enumerate(idx):
        src = pos
        if i in bad:  # the next good sample of the micro-batch takes its place
            src = next(p for p in list(range(pos + 1, len(idx))) + list(range(pos)) if idx[p] not in bad)
        top, left, h, w, flip = map(int, ok([a.driver, "plan", *image_size(paths[idx[src]]), 11, 2, idx[src], 32]).stdout.split())
        ref = render_ours(a, [(paths[idx[src]], 32, True, (top, left, h, w), flip)], tmp)[0][0]
        check(np.array_equal(b["images"][pos], ref.astype(np.float32)), f"position {pos} (sample {i}) differs from its transform")
        check(b["labels"][pos] == labels[idx[src]], f"position {pos}: label {b['labels'][pos]} != {labels[idx[src]]}")
    print("batch: the loader's micro-batch equals each sample's plan + transform; bad files replaced by the next good sample")


def image_size(path):
    from PIL import Image
    return Image.open(path).size


# --- train_resnet runs
def case_errors(a, tmp):
    ds = make_dataset(tmp)
    root = ds["root"]

    def bad(args, want):
        p = run([a.train, *SMALL, "--max-steps", "1", *args])
        err = p.stderr.strip().splitlines()
        check(p.returncode == 2, f"{args}: exit {p.returncode} (want 2): {p.stderr[-500:]}")
        check(len(err) == 1 and err[0].startswith("train_resnet: error:") and re.search(want, err[0]),
              f"{args}: want one line matching '{want}', got: {p.stderr[-800:]}")
        check("Epoch[" not in p.stdout, f"{args}: trained before failing")

    bad(["--data", os.path.join(tmp, "nope")], "no such file or folder")
    os.makedirs(os.path.join(tmp, "empty", "train"))
    bad(["--data", os.path.join(tmp, "empty")], "no class folders")
    os.makedirs(os.path.join(tmp, "notrain", "images"))
    bad(["--data", os.path.join(tmp, "notrain")], "no train/ folder")
    os.makedirs(os.path.join(root, "train", "zz_empty"))
    bad(["--data", root], r"class folder\(s\) with no images: zz_empty")
    os.rmdir(os.path.join(root, "train", "zz_empty"))
    os.rename(os.path.join(root, "val", "c9"), os.path.join(root, "val", "c9x"))
    bad(["--data", root], "classes of val/ differ.*missing in val: c9.*only in val: c9x")
    os.rename(os.path.join(root, "val", "c9x"), os.path.join(root, "val", "c9"))
    lst = os.path.join(tmp, "list.txt")
    with open(lst, "w") as f:
        f.write("ds/train/c0/img000.jpg 0\nds/train/c1/img001.jpg x\n")
    bad(["--data", lst], r"list.txt:2: label 'x'")
    with open(lst, "w") as f:
        f.write("missing/a.jpg 0\n")
    bad(["--data", lst], "first entries do not exist")
    bad(["--data", root, "--crop-scale", "0.5"], "--crop-scale")
    bad(["--data", root, "--loader", "gpu"], "--loader gpu")
    bad(["--data", root, "--num-classes", "5"], "fewer than the 10 classes")
    # A list file trains as the folder does.
    with open(lst, "w") as f:
        for dp, _, fs in sorted(os.walk(os.path.join(root, "train"))):
            for fn in sorted(fs):
                f.write(f"{os.path.relpath(os.path.join(dp, fn), tmp)} {int(os.path.basename(dp)[1:])}\n")
    p = ok([a.train, *SMALL, "--max-steps", "2", "--data", lst])
    check("list " in p.stdout and "Epoch[0], Batch[0]" in p.stdout, f"list file run: {p.stdout[-800:]}")
    print("errors: missing path, empty folder, no train/, empty class, val classes differ, bad list lines, "
          "bad options: one line each, exit 2, before training; a list file trains")


def bombs(root):
    """A JPEG and a PNG of a few hundred bytes whose headers declare 20000x20000 pixels (1.2 GB
    as RGB): real streams from Pillow with the dimensions patched (the PNG's CRC redone)."""
    import zlib
    from PIL import Image
    im = Image.new("RGB", (16, 16), (200, 30, 90))
    b = io.BytesIO()
    im.save(b, "JPEG")
    jpg = bytearray(b.getvalue())
    i = jpg.index(b"\xff\xc0")  # baseline frame header: length, precision, height, width
    jpg[i + 5:i + 9] = struct.pack(">HH", 20000, 20000)
    b = io.BytesIO()
    im.save(b, "PNG")
    png = bytearray(b.getvalue())
    png[16:24] = struct.pack(">II", 20000, 20000)
    png[29:33] = struct.pack(">I", zlib.crc32(bytes(png[12:29])))
    out = {"c3/bomb.jpg": bytes(jpg), "c3/bomb.png": bytes(png)}
    for rel, data in out.items():
        with open(os.path.join(root, "train", rel), "wb") as f:
            f.write(data)
    return list(out)


def case_skip(a, tmp):
    import resource
    ds = make_dataset(tmp)
    bad = ds["bad"] + bombs(ds["root"])
    p = ok([a.train, *SMALL, "--epochs", "2", "--data", ds["root"], "--log-every", "5"])
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # train_resnet's, the only child yet
    for b in bad:
        n = sum(1 for l in p.stderr.splitlines() if "warning: skipping" in l and f"/{b}: " in l)
        check(n == 1, f"{b}: {n} warnings (want exactly 1):\n{p.stderr[-1500:]}")
        if "bomb" in b:
            check(any(f"/{b}: image of 20000x20000" in l and "decompression-bomb limit" in l for l in p.stderr.splitlines()),
                  f"{b}: not refused as a decompression bomb:\n{p.stderr[-1500:]}")
    # Decoding one bomb would allocate (and zero) 1.2 GB at least; the run's own peak is ~0.1 GB.
    check(peak_mb < 600, f"train_resnet's peak memory {peak_mb:.0f} MB: a bomb was allocated for")
    m = re.search(r"(\d+) unreadable image read\(s\) skipped", p.stdout)
    # Every bad file is read once per epoch unless it falls in the 249 % 8 = 1 sample the sampler
    # drops per epoch (batch 8, 247 + 2 images, 1 rank).
    check(m and 2 * len(bad) - 2 <= int(m.group(1)) <= 2 * len(bad),
          f"summary: {m.group(0) if m else 'missing'}:\n{p.stdout[-800:]}")
    check(all(re.search(r"data wait: [0-9.]+ ms/step", l) for l in p.stdout.splitlines() if l.startswith("Epoch[")),
          "a log line without its data wait")
    p = run([a.train, *SMALL, "--epochs", "1", "--data", ds["root"], "--strict-data"])
    check(p.returncode == 2 and "--strict-data" in p.stderr and any(b in p.stderr for b in bad),
          f"--strict-data: exit {p.returncode}: {p.stderr[-800:]}")
    print(f"skip: one warning per bad file (2 decompression bombs among them), {m.group(1)} skipped reads counted, "
          f"peak {peak_mb:.0f} MB; --strict-data stops with the file's name")


def case_special(a, tmp):
    """Issue 22, items 3 and 5: files a list file may name that must not be read (or waited on)."""
    import resource
    import socket
    import time
    ds = make_dataset(tmp)
    good = []
    for dp, _, fs in sorted(os.walk(os.path.join(ds["root"], "train"))):
        good += [(os.path.join(dp, fn), int(os.path.basename(dp)[1:])) for fn in sorted(fs)
                 if os.path.join(os.path.basename(dp), fn) not in ds["bad"]]
    sp = os.path.join(tmp, "special")
    os.makedirs(sp)
    fifo = os.path.join(sp, "fifo.jpg")
    os.mkfifo(fifo)  # nobody ever writes it: opening it for reading would block forever
    sock_path = os.path.join(sp, "sock.jpg")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(sock_path)
    sparse2g = os.path.join(sp, "sparse2g.jpg")  # the 2 GB sparse .jpg: zeros, not a JPEG
    with open(sparse2g, "wb") as f:
        f.truncate(2 << 30)
    sparse64g = os.path.join(sp, "sparse64g.jpg")  # starts like a JPEG, 64 GB: over the limit by its size
    with open(sparse64g, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0")
        f.truncate(64 << 30)
    limit = max(os.path.getsize(p) for p, _ in good) + 1024  # every good image passes
    big = os.path.join(sp, "big.jpg")  # a real JPEG, just over --max-image-bytes
    shutil.copy(good[0][0], big)
    with open(big, "ab") as f:
        f.write(b"\0" * (limit + 1 - os.path.getsize(big)))
    special = {fifo: "a FIFO, not an image file", sock_path: "a socket, not an image file",
               "/dev/zero": "a character device, not an image file",
               sparse2g: "not a JPEG or PNG image (from its first bytes; the other 2147483640 not read)",
               sparse64g: f"68719476736 bytes, more than --max-image-bytes {limit} (not read)",
               big: f"{limit + 1} bytes, more than --max-image-bytes {limit} (not read)"}
    entries = [(p, 0) for p in special] + good
    entries = entries[:len(entries) // 8 * 8]  # batch 8, one rank: no sample dropped, each read every epoch
    lst = os.path.join(tmp, "list.txt")
    with open(lst, "w") as f:
        for path, label in entries:
            f.write(f"{path} {label}\n")
    t0 = time.monotonic()
    p = ok([a.train, *SMALL, "--epochs", "2", "--data", lst, "--max-image-bytes", str(limit)], timeout=120)
    secs = time.monotonic() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    lines = p.stderr.splitlines()
    for path, why in special.items():
        mine = [l for l in lines if "warning: skipping" in l and f" {path}: " in l]
        check(len(mine) == 1 and why in mine[0], f"{path}: want one warning with '{why}', got {mine}:\n{p.stderr[-2000:]}")
    m = re.search(r"(\d+) unreadable image read\(s\) skipped", p.stdout)
    check(m and int(m.group(1)) == 2 * len(special), f"summary: {m.group(0) if m else 'missing'} (want {2 * len(special)})")
    # Reading the 2 GB file whole, as before, cost 2.27 GB; the run itself needs ~0.1 GB.
    check(peak_mb < 600, f"train_resnet's peak memory {peak_mb:.0f} MB: a special file was read")
    p = run([a.train, *SMALL, "--epochs", "1", "--data", lst, "--strict-data"], timeout=60)
    check(p.returncode == 2 and f"{fifo}: cannot read: a FIFO" in p.stderr and "--strict-data" in p.stderr,
          f"--strict-data: exit {p.returncode}: {p.stderr[-800:]}")
    sock.close()
    print(f"special: FIFO, socket, /dev/zero, 2 GB sparse non-JPEG, 64 GB sparse JPEG, a file over "
          f"--max-image-bytes: one warning each naming it, {m.group(1)} skipped reads, peak {peak_mb:.0f} MB, "
          f"2 epochs in {secs:.1f} s; --strict-data stops at the FIFO")


def checksum(out):
    m = re.search(r"params checksum (\S+ \S+)", out)
    check(m, "no checksum line:\n" + out[-1000:])
    return m.group(1)


def case_resume(a, tmp):
    ds = make_dataset(tmp)
    base = [a.train, *SMALL, "--data", ds["root"], "--optimizer", "sgd", "--lr", "0.05", "--epochs", "3"]
    full = ok(base + ["--max-steps", "40"])
    ck = os.path.join(tmp, "ck.safetensors")
    ok(base + ["--max-steps", "17", "--save", ck])  # stops mid-epoch 0 (30 steps per epoch)
    resumed = ok(base + ["--max-steps", "40", "--resume", ck])
    losses = lambda t: re.findall(r"Epoch\[(\d+)\], Batch\[(\d+)\], Loss: ([0-9.]+)", t)  # noqa: E731
    tail = [l for l in losses(full.stdout) if int(l[0]) * 30 + int(l[1]) >= 17]
    check(tail == losses(resumed.stdout), f"losses differ after resuming:\n{tail}\n{losses(resumed.stdout)}")
    check(checksum(full.stdout) == checksum(resumed.stdout), "final parameters differ between resumed and uninterrupted")
    print("resume: resumed at step 17 (mid-epoch), same losses and bit-identical parameters as the uninterrupted run")


def case_launch(a, tmp):
    if not os.path.exists(a.launch):
        print(f"SKIP: {a.launch} not built")
        return SKIP
    ds = make_dataset(tmp)
    p = ok([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", os.path.join(tmp, "log"), a.train,
            *SMALL, "--data", ds["root"], "--epochs", "2"], timeout=170)
    check("Data: ImageFolder" in p.stdout and "Checksums: all 2 rank(s) agree" in p.stdout, p.stdout[-1500:])
    check(re.search(r"1 rank\(s\)|2 rank\(s\) x batch 8", p.stdout), p.stdout[-500:])
    print("launch: 2 CPU ranks trained on the folder, checksums agree")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--driver", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--launch", required=True)
    ap.add_argument("--dataset", help="a data set made by make_dataset.py (with info.json), copied per case")
    a = ap.parse_args()
    global ARGS
    ARGS = a
    fn = globals().get("case_" + a.case)
    if not fn:
        print(f"unknown case {a.case}")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        try:
            r = fn(a, tmp)
        except Failure as e:
            print(f"FAIL {a.case}: {e}")
            return 1
    return r or 0


if __name__ == "__main__":
    sys.exit(main())
