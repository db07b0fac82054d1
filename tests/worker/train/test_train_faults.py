#!/usr/bin/python3
"""train_resnet's faults of issue 22 (the worker's items), end to end.

Usage: test_train_faults.py CASE --train PATH --launch PATH
Cases: silent_store (a store that accepts and never answers, and one that refuses: given up after
--comm-timeout, not a fixed 60 s), options (two ranks under launch, rank 1 with another
--optimizer, then another --log-every: both refused at start-up in seconds, the option and both
values named), resume_dir (--resume naming a folder or a missing file: what is there and what was
looked for).
Exit 0 pass, 1 fail, 77 skipped (`launch` not built).
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_train_resnet import SKIP, SMALL, check, main, ok, run  # noqa: E402


def case_silent_store(a, tmp):
    """Item 13: the store's connection and first call are bounded by --comm-timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts (the kernel does), never answers
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    figures = []
    for what, port, needle in [("silent", listener.getsockname()[1], "no reply from the store"),
                               ("refusing", closed.getsockname()[1], "could not reach the store")]:
        env = {"PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "2", "LAUNCH_STORE_ADDR": f"127.0.0.1:{port}",
               "LAUNCH_STORE_TOKEN": "0123456789abcdef" * 4}
        t0 = time.monotonic()
        p = run([a.train] + SMALL + ["--comm-timeout", "2"], env, timeout=30)
        secs = time.monotonic() - t0
        err = p.stderr.strip().splitlines()
        check(p.returncode == 1 and len(err) == 1 and needle in err[0] and f"127.0.0.1:{port}" in err[0]
              and "--comm-timeout 2 s" in err[0], f"{what} store: exit {p.returncode}: {p.stderr[-800:]}")
        check(1.5 < secs < 10, f"{what} store: gave up after {secs:.1f} s (--comm-timeout 2)")
        figures.append(f"{what} store given up after {secs:.2f} s")
    listener.close()
    closed.close()
    print("silent_store: " + ", ".join(figures) + " (--comm-timeout 2; it was 60 s whatever the option)")


def case_options(a, tmp):
    """Item 14: a rank with other options is refused at start-up, naming the option and both values."""
    if not os.path.exists(a.launch):
        print(f"SKIP: {a.launch} not built")
        return SKIP
    base = " ".join([a.train] + SMALL + ["--epochs", "50", "--comm-timeout", "60"])
    for extra, needle in [("--optimizer sgd", "--optimizer sgd on rank 1, adam on rank 0"),
                          ("--log-every 3", "--log-every 3 on rank 1, 10 on rank 0")]:
        log = os.path.join(tmp, "log-" + extra.split()[0].strip("-"))
        script = f'if [ "$RANK" = 1 ]; then exec {base} {extra}; else exec {base}; fi'
        t0 = time.monotonic()
        p = run([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", log, "sh", "-c", script],
                timeout=120)
        secs = time.monotonic() - t0
        logs = {r: open(os.path.join(log, f"workerlog.{r}")).read() for r in (0, 1)}
        check(p.returncode == 2, f"{extra}: launch exited {p.returncode}, want 2:\n{p.stderr[-1500:]}")
        # Every rank names it; the first to exit is launch's root cause, and its teardown may end
        # the other before (or while) it writes its own line.
        check(any(needle in logs[r] and f"train_resnet: error: rank {r}: the ranks do not train the same run" in logs[r]
                  for r in (0, 1)), f"{extra}: no rank's log names '{needle}':\n{logs[0][-1000:]}\n{logs[1][-1000:]}")
        check(needle in p.stderr, f"{extra}: launch's report does not carry the error:\n{p.stderr[-1500:]}")
        for r in (0, 1):
            check("Epoch[" not in logs[r], f"{extra}: rank {r} trained before the check")
        check(secs < 30, f"{extra}: refused only after {secs:.1f} s")
        print(f"options: rank 1 with {extra}: refused in {secs:.2f} s: {needle}")
    # The options that may differ do not stop a run.
    script = f'if [ "$RANK" = 1 ]; then exec {base} --max-steps 2 --threads 2 --data-threads 2 --comm-timeout 30; ' \
             f'else exec {base} --max-steps 2 --metrics-file {tmp}/m.jsonl; fi'
    p = run([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", os.path.join(tmp, "log-ok"),
             "sh", "-c", script], timeout=120)
    check(p.returncode == 0, f"per-rank options refused: exit {p.returncode}:\n{p.stderr[-1500:]}")


def case_resume_dir(a, tmp):
    """Item 15: --resume DIR says what is there and what was looked for."""
    ck_dir = os.path.join(tmp, "ck")
    ck = os.path.join(ck_dir, "run1.safetensors")
    ok([a.train] + SMALL + ["--max-steps", "1", "--save", ck])

    def refused(arg, needles):
        p = run([a.train] + SMALL + ["--resume", arg])
        err = p.stderr.strip().splitlines()
        check(p.returncode == 1 and len(err) == 1 and all(n in err[0] for n in needles),
              f"--resume {arg}: exit {p.returncode}, want one line with {needles}: {p.stderr[-800:]}")
        check("does not exist" not in err[0] or arg != ck_dir, f"a folder said not to exist: {err[0]}")
        return err[0]

    line = refused(ck_dir, [f"--resume '{ck_dir}' is a folder, not a checkpoint", "NAME.train.safetensors",
                            f"in it: {ck}"])
    refused(os.path.join(ck_dir, "run2.safetensors"), ["run2.safetensors' does not exist", f"checkpoints in '{ck_dir}': {ck}"])
    refused(os.path.join(tmp, "nope", "x.safetensors"), ["does not exist (nor its folder"])
    os.makedirs(os.path.join(tmp, "empty"))
    refused(os.path.join(tmp, "empty"), ["is a folder", "that folder holds none"])
    print(f"resume_dir: {line}")


if __name__ == "__main__":
    sys.exit(main(globals()))
