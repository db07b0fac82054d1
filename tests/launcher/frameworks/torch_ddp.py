"""A PyTorch program nobody on this project wrote the launcher for: gloo collectives and DDP.

Run under `launch --devices cpu --nproc_per_node 2` (or torchrun's spellings of it). Checks what
a PyTorch program reads of torchrun's contract, runs the collectives on gloo, trains a small
model with DistributedDataParallel and a DistributedSampler, and checks that every rank ends with
the same parameters. Prints `rank R: ok <fingerprint>` on success; exits 1 otherwise.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

# What torchrun sets for every worker (torch.distributed.elastic.agent.server.local_elastic_agent).
TORCHRUN_VARS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                 "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE"]


def fail(msg):
    print(f"rank {os.environ.get('RANK', '?')}: FAILED: {msg}", flush=True)
    sys.exit(1)


def main():
    missing = [v for v in TORCHRUN_VARS if v not in os.environ]
    if missing:
        fail(f"torchrun's variables missing: {missing}")
    if not torch.distributed.is_torchelastic_launched():
        fail("torch.distributed.is_torchelastic_launched() is False")
    if os.environ["TORCHELASTIC_USE_AGENT_STORE"] != "False":
        fail("TORCHELASTIC_USE_AGENT_STORE must be False: rank 0 binds MASTER_PORT itself")
    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank != int(os.environ["RANK"]) or world != int(os.environ["WORLD_SIZE"]):
        fail(f"process group rank {rank}/{world} is not RANK/WORLD_SIZE")

    # --- collectives
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    if t.item() != world * (world + 1) / 2:
        fail(f"all_reduce gave {t.item()}")
    b = torch.tensor([42.0 if rank == 0 else -1.0])
    dist.broadcast(b, src=0)
    if b.item() != 42.0:
        fail(f"broadcast gave {b.item()}")
    parts = [torch.zeros(2) for _ in range(world)]
    dist.all_gather(parts, torch.tensor([float(rank), float(rank * rank)]))
    if [p.tolist() for p in parts] != [[float(r), float(r * r)] for r in range(world)]:
        fail(f"all_gather gave {parts}")
    dist.barrier()

    # --- DDP: every rank its own shard, averaged gradients, the same parameters at the end
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=1)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    every = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    worst = max(float((e - flat).abs().max()) for e in every)
    if worst != 0.0:
        fail(f"parameters differ across ranks by up to {worst:.3e}")
    print(f"rank {rank}: ok {float(flat.sum()):.9e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
