"""A failing PyTorch rank whose traceback the log's tail does not show.

Rank 1 raises inside a function decorated with torch.distributed.elastic's @record, which writes
the exception to TORCHELASTIC_ERROR_FILE; then 30 lines are printed at exit, so the last lines of
its log hold no trace of the exception. Rank 0 waits to be stopped. The launcher's failure
report must show the exception and its traceback anyway, from the error file.
"""
import atexit
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


def configure_optimizer(lr):
    if lr < 0:
        raise ValueError(f"learning rate must be positive, got {lr}")


@record
def main():
    rank = int(os.environ["RANK"])
    if rank == 0:
        time.sleep(120)  # stopped by the launcher when rank 1 fails
        return
    atexit.register(lambda: [print(f"shutting down, step {i} of 30", flush=True) for i in range(30)])
    print("rank 1 configuring the optimizer", flush=True)
    configure_optimizer(-1.0)


if __name__ == "__main__":
    main()
