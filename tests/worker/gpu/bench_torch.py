"""PyTorch eager baseline of scripts/bench_gpu.sh (GPU machine): torchvision ResNet, SGD with
momentum, synthetic data already on the GPU, bf16 autocast + channels_last (or fp32 with TF32
convolutions, PyTorch's default), cudnn.benchmark. Under torchrun (WORLD_SIZE > 1) it wraps the
model in DistributedDataParallel over NCCL. Prints one JSON line (rank 0): images/s over all
ranks (median of timed windows after warm-up), peak memory (max_memory_allocated, per GPU) and
the seconds from BENCH_T0 (the shell's start time, epoch seconds) to the first finished step.
"""
import argparse
import json
import os
import statistics
import time

T_IMPORT = time.time()
import torch  # noqa: E402
import torchvision  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--steps-per-window", type=int, default=10)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    t0 = float(os.environ.get("BENCH_T0", T_IMPORT))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    if world > 1:
        torch.distributed.init_process_group("nccl", device_id=dev)
    torch.backends.cudnn.benchmark = True
    bf16 = a.precision == "bf16"
    m = getattr(torchvision.models, f"resnet{a.depth}")().to(dev)
    if bf16:
        m = m.to(memory_format=torch.channels_last)
    if world > 1:
        m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[local])
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    g = torch.Generator(device=dev).manual_seed(rank)
    x = torch.randn(a.batch, 3, 224, 224, device=dev, generator=g)
    if bf16:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev, generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss

    step()
    torch.cuda.synchronize()
    first = time.time() - t0
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    rates = []
    for _ in range(a.windows):
        s = time.perf_counter()
        for _ in range(a.steps_per_window):
            step()
        torch.cuda.synchronize()
        rates.append(a.steps_per_window * a.batch * world / (time.perf_counter() - s))
    peak = torch.cuda.max_memory_allocated(dev)
    if rank == 0:
        print(json.dumps({"what": "torch", "depth": a.depth, "batch": a.batch, "precision": a.precision,
                          "gpus": world, "images_per_s": statistics.median(rates), "min": min(rates),
                          "max": max(rates), "first_step_s": first, "peak_bytes": peak,
                          "torch": torch.__version__}), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
