#!/usr/bin/python3
"""The competitors of scripts/bench_data.sh, images/s delivered (median of 1 s windows):
  dataloader: torch DataLoader + torchvision ImageFolder + PIL, RandomResizedCrop(size) +
              RandomHorizontalFlip + ToTensor + Normalize, WORKERS processes, batches moved to
              the GPU (pin_memory) when --device cuda
  nvjpeg:     torchvision.io.decode_jpeg(device='cuda') on batches of files read by the main
              process, then RandomResizedCrop-like crop + antialiased resize + flip + normalize on
              the GPU (torchvision >= 0.19 batched decode)
Prints one JSON line: images/s, and the CPU time per image after the warm-up of this process
and its live worker processes (on a shared machine the cost that other load does not dilute).
"""
import argparse
import json
import os
import resource
import time

import torch


def cpu_seconds(pids):
    """User + system time of this process and of the processes `pids` (the DataLoader's workers)."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    t = u.ru_utime + u.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            t += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except OSError:
            pass
    return t


def windows(step, seconds, pids=lambda: []):
    step()  # warm-up: worker processes start, the first batches fill the queue
    t0 = tw = time.time()
    cpu0 = cpu_seconds(pids())
    n, out, total = 0, [], 0
    while time.time() - t0 < seconds:
        k = step()
        n += k
        total += k
        dt = time.time() - tw
        if dt >= 1.0:
            out.append(n / dt)
            n, tw = 0, time.time()
    cpu_ms = (cpu_seconds(pids()) - cpu0) * 1e3 / total if total else 0.0
    out.sort()
    return out[len(out) // 2] if out else 0.0, len(out), cpu_ms


def dataloader(a):
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = ImageFolder(os.path.join(a.data, "train"), tf)
    cuda = a.device == "cuda"
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                     pin_memory=cuda, drop_last=True, persistent_workers=True, prefetch_factor=4)
    it = iter(dl)

    def step():
        nonlocal it
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(dl)
            x, y = next(it)
        if cuda:
            x = x.to("cuda", non_blocking=True).to(memory_format=torch.channels_last)
            torch.cuda.synchronize()
        return x.shape[0]
    return windows(step, a.seconds, lambda: [w.pid for w in getattr(it, "_workers", [])])


def nvjpeg(a):
    import torch.nn.functional as F
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(a.data, "train")) for f in fs]
    files.sort()
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
    pos = 0

    def step():
        nonlocal pos
        batch = [read_file(files[(pos + i) % len(files)]) for i in range(a.batch)]
        pos += a.batch
        imgs = decode_jpeg(batch, mode=ImageReadMode.RGB, device="cuda")  # grayscale photos too
        out = []
        for im in imgs:  # a fixed central crop of 80 % area: the resize is what costs
            _, h, w = im.shape
            ch, cw = int(h * 0.9), int(w * 0.9)
            crop = im[:, (h - ch) // 2:(h - ch) // 2 + ch, (w - cw) // 2:(w - cw) // 2 + cw][None].float()
            out.append(F.interpolate(crop, size=(a.size, a.size), mode="bilinear", antialias=True, align_corners=False))
        x = ((torch.cat(out) - mean) / std).to(torch.bfloat16)
        torch.cuda.synchronize()
        return x.shape[0]
    return windows(step, a.seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["dataloader", "nvjpeg"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(1)
    try:
        ips, n, cpu_ms = dataloader(a) if a.what == "dataloader" else nvjpeg(a)
        print(json.dumps({"what": a.what, "workers": a.workers, "images_per_s": round(ips, 1),
                          "cpu_ms_per_image": round(cpu_ms, 3), "windows": n}))
    except Exception as e:  # e.g. torchvision too old for batched decode_jpeg on the GPU
        print(json.dumps({"what": a.what, "error": f"{type(e).__name__}: {e}"}))


if __name__ == "__main__":
    main()
