"""PyTorch side of scripts/bench_memory.sh (GPU machine, issue 15): torchvision ResNet, bf16
autocast + channels_last, SGD with momentum, synthetic data on the GPU, cudnn.benchmark, and
optionally torch.utils.checkpoint around every residual block (use_reentrant=False, the
recommended mode; the stem and the head stay as they are). Prints one JSON line: images/s
(median of timed windows after warm-up) and the peak of max_memory_allocated.

Checkpointing re-runs each block's forward in backward, batch norm included, so PyTorch updates
the running statistics twice per step there (a known caveat of checkpoint with batch norm);
our --recompute updates them once. It does not change what is measured here.
"""
import argparse
import json
import statistics
import time

import torch
import torch.utils.checkpoint
import torchvision


class Checkpointed(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--checkpoint", choices=["none", "block"], default="none")
    ap.add_argument("--steps-per-window", type=int, default=6)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    torch.backends.cudnn.benchmark = True
    m = getattr(torchvision.models, f"resnet{a.depth}")()
    if a.checkpoint == "block":
        for name in ("layer1", "layer2", "layer3", "layer4"):
            layer = getattr(m, name)
            setattr(m, name, torch.nn.Sequential(*[Checkpointed(b) for b in layer]))
    m = m.to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(a.batch, 3, 224, 224, device=dev, generator=g).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev, generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()

    for _ in range(1 + a.warmup):
        step()
    torch.cuda.synchronize()
    rates = []
    for _ in range(a.windows):
        s = time.perf_counter()
        for _ in range(a.steps_per_window):
            step()
        torch.cuda.synchronize()
        rates.append(a.steps_per_window * a.batch / (time.perf_counter() - s))
    print(json.dumps({"what": "torch", "depth": a.depth, "batch": a.batch, "checkpoint": a.checkpoint,
                      "images_per_s": statistics.median(rates), "peak_bytes": torch.cuda.max_memory_allocated(dev),
                      "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
