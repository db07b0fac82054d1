"""PyTorch baseline of scripts/bench_gpu.sh (GPU machine): torchvision ResNet, SGD with momentum,
synthetic data already on the GPU, bf16 autocast + channels_last (or fp32 with TF32 convolutions,
PyTorch's default), cudnn.benchmark; eager, or torch.compile with --compile MODE (default,
max-autotune-no-cudagraphs, ...). Under torchrun (WORLD_SIZE > 1) it wraps the model in
DistributedDataParallel over NCCL. Prints one JSON line (rank 0): images/s over all ranks (median
of timed windows after warm-up), peak memory (max_memory_allocated, per GPU), the seconds from
BENCH_T0 (the shell's start time, epoch seconds) to the first finished step, and the CUDA kernels
of one step (torch.profiler, after the timed windows: they do not perturb the timing).
--profile N: also the N kernels with the most device time and the time by kind of kernel.
--checkpoint block: torch.utils.checkpoint on every residual block (scripts/bench_memory.sh's
recomputation baseline).
"""
import argparse
import json
import os
import statistics
import time

T_IMPORT = time.time()
import torch  # noqa: E402
import torchvision  # noqa: E402


def kind(name):
    n = name.lower()
    if "nchwtonhwc" in n or "nhwctonchw" in n or "addpadding" in n or ("pad" in n and "nhwc" in n):
        return "conv layout/padding"
    if "dgrad" in n or "wgrad" in n or "fprop" in n or "conv" in n or "xmma" in n or "implicit" in n \
            or "cudnn" in n or "sm90_" in n or "cutlass" in n or "gemm" in n or "gemv" in n:
        return "conv/gemm (cuDNN, cuBLAS)"
    if "batch_norm" in n or "bn_" in n or "welford" in n:
        return "batch norm"
    if "max_pool" in n or "maxpool" in n:
        return "max-pool"
    if "triton" in n:
        return "triton (fused elementwise/reductions)"
    if "elementwise" in n or "vectorized" in n or "reduce" in n:
        return "elementwise/reduce (aten)"
    return "other"


def profile_step(step, top):
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = {}
    count = 0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if getattr(e, "is_user_annotation", False):
            continue
        name = e.name
        if name.startswith("Memcpy") or name.startswith("Memset"):
            continue
        count += 1
        k = kernels.setdefault(name, [0, 0.0])
        k[0] += 1
        k[1] += e.device_time_total / 1000.0 if hasattr(e, "device_time_total") else e.cuda_time_total / 1000.0
    by_kind = {}
    for name, (c, ms) in kernels.items():
        b = by_kind.setdefault(kind(name), [0, 0.0])
        b[0] += c
        b[1] += ms
    out = {"kernels_per_step": count, "kernel_ms": sum(v[1] for v in kernels.values()),
           "by_kind": {k: {"calls": v[0], "ms": round(v[1], 3)} for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1][1])}}
    if top:
        out["top"] = [{"kernel": n[:120], "calls": c, "ms": round(ms, 3)}
                      for n, (c, ms) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:top]]
    return out


class Checkpointed(torch.nn.Module):
    """A residual block whose activations are recomputed in backward."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--steps-per-window", type=int, default=10)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", default="", help="torch.compile mode ('default', 'max-autotune-no-cudagraphs', ...); empty: eager")
    ap.add_argument("--profile", type=int, default=0, help="list the N kernels with the most device time")
    ap.add_argument("--no-kernels", action="store_true", help="skip the profiled step (kernels per step)")
    ap.add_argument("--checkpoint", choices=["none", "block"], default="none",
                    help="block: torch.utils.checkpoint on every residual block")
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
    m = getattr(torchvision.models, f"resnet{a.depth}")()
    if a.checkpoint == "block":
        for name in ("layer1", "layer2", "layer3", "layer4"):
            setattr(m, name, torch.nn.Sequential(*[Checkpointed(b) for b in getattr(m, name)]))
    m = m.to(dev)
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

    # The model compiled (forward and, through AOTAutograd, backward); loss and optimizer eager.
    net = torch.compile(m, mode=None if a.compile == "default" else a.compile) if a.compile else m

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(net(x), y)
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
    out = {"what": "torch", "mode": f"compile:{a.compile}" if a.compile else "eager", "depth": a.depth,
           "batch": a.batch, "precision": a.precision, "checkpoint": a.checkpoint, "gpus": world, "images_per_s": statistics.median(rates),
           "min": min(rates), "max": max(rates), "first_step_s": first, "peak_bytes": peak,
           "torch": torch.__version__}
    if rank == 0 and not a.no_kernels:
        try:
            out.update(profile_step(step, a.profile))
        except Exception as e:  # the figures above stand without it
            out["profile_error"] = str(e)[:200]
    if rank == 0:
        print(json.dumps(out), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
