"""The paddle.distributed guide's program: init_parallel_env + DataParallel(resnet18), on CPU ranks.

Run under `launch --devices cpu --nproc_per_node 2`. Each rank trains two SGD steps on its own
random batch; DataParallel averages the gradients, so every rank must end with the same
trainable parameters (batch norm's running statistics, which paddle lists among the parameters
too, follow each rank's own batches). Prints `rank R: params <sum> <fingerprint>` and exits 1 if the ranks disagree.
"""
import os
import sys

import numpy as np
import paddle
import paddle.distributed as dist
import paddle.nn.functional as F
from paddle.vision.models import resnet18


def main():
    paddle.set_device("cpu")
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["PADDLE_TRAINERS_NUM"]), (world, os.environ["PADDLE_TRAINERS_NUM"])
    paddle.seed(1234)  # the same initial weights everywhere (DataParallel also broadcasts them)
    model = paddle.DataParallel(resnet18(num_classes=10))
    opt = paddle.optimizer.SGD(learning_rate=0.05, parameters=model.parameters())
    gen = np.random.default_rng(rank)  # a different batch per rank
    for step in range(2):
        x = paddle.to_tensor(gen.standard_normal((4, 3, 32, 32)).astype("float32"))
        y = paddle.to_tensor(gen.integers(0, 10, (4, 1)).astype("int64"))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        print(f"rank {rank}: step {step} loss {float(loss):.6f}", flush=True)
    trained = [p for p in model.parameters() if not p.stop_gradient]
    flat = np.concatenate([p.numpy().ravel() for p in trained]).astype(np.float64)
    mine = paddle.to_tensor(flat)
    gathered = []
    dist.all_gather(gathered, mine)
    print(f"rank {rank}: params {flat.sum():.9e} {float(np.abs(flat).sum()):.9e}", flush=True)
    worst = max(float(np.abs(g.numpy() - flat).max()) for g in gathered)
    if worst != 0.0:
        print(f"rank {rank}: parameters differ across ranks by up to {worst:.3e}", flush=True)
        return 1
    print(f"rank {rank}: all {world} ranks hold the same parameters", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
