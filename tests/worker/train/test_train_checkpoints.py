#!/usr/bin/python3
"""Checkpoints that never lose a run (issue 12): what train_resnet refuses at start-up, what it
cleans up after a killed save, and how it stops on SIGINT/SIGTERM.

Usage: test_train_checkpoints.py CASE --train PATH --launch PATH
Cases: refuse (bad --save, partial checkpoints, another optimizer, --seed -1), interrupted (stale
temporary files, a save killed between its two renames), stop (SIGINT alone, SIGTERM to `launch`
with two ranks), one_rank (the checkpoint signal, then SIGTERM, to rank 1 alone: both ranks act at
one step), slow_save (rank 0's saves far longer than --comm-timeout end no healthy run), save_once
(the same state is written once), tee (Ctrl-C with stdout's reader gone: the resume hint on stderr),
integrity (a flipped bit in the weights or the training state, a NaN or inf weight: refused at
load, naming the file and the tensor).
Exit 0 pass, 1 fail, 77 skipped (`launch` not built).
"""
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_train_resnet import (SKIP, SMALL, check, checksums, clean_env, free_port, main, ok, read_st,  # noqa: E402
                               run, write_st)


def usage(a, args, needle):
    t0 = time.monotonic()
    p = run([a.train] + args)
    lines = p.stderr.strip().splitlines()
    check(p.returncode == 2, f"{args}: exit {p.returncode}, expected 2; stderr: {p.stderr}")
    check(len(lines) == 1 and needle in lines[0], f"{args}: '{needle}' not in {lines}")
    return time.monotonic() - t0, lines[0]


def case_refuse(a, tmp):
    long_run = SMALL + ["--epochs", "1000"]  # would train for minutes: a refusal must come first
    # --save naming a directory: refused before training, nothing written (no orphan state file).
    d = os.path.join(tmp, "adir")
    os.mkdir(d)
    dt, line = usage(a, long_run + ["--save", d], "is a directory")
    check(dt < 20 and os.listdir(d) == [] and sorted(os.listdir(tmp)) == ["adir"],
          f"--save DIR: {dt:.1f} s, left {os.listdir(tmp)} / {os.listdir(d)}")
    # The training state's name a directory: the same.
    os.mkdir(os.path.join(tmp, "x.train.safetensors"))
    usage(a, long_run + ["--save", os.path.join(tmp, "x.safetensors")], "x.train.safetensors' is a directory")
    # A folder that cannot be written: a mode-555 folder (not for root, who may write anyway)
    # and, for everyone, sysfs, where no file can be created.
    ro = os.path.join(tmp, "ro")
    os.mkdir(ro, 0o555)
    places = [] if os.geteuid() == 0 else [os.path.join(ro, "c.safetensors")]
    places.append("/sys/kernel/train_resnet_test.safetensors")
    for path in places:
        dt, line = usage(a, long_run + ["--save", path], "cannot write in")
        check(dt < 20, f"--save {path} refused only after {dt:.1f} s")
    check(os.listdir(ro) == [], f"files left in the read-only folder: {os.listdir(ro)}")
    print(f"refused at start-up: --save DIR, and {', '.join(places)}: {line}")

    # --resume auto with weights but no training state: refused (it used to train from scratch
    # and overwrite the weights); so is a training state without weights.
    ck = os.path.join(tmp, "ck.safetensors")
    ok([a.train] + SMALL + ["--max-steps", "2", "--save", ck])
    weights = open(ck, "rb").read()
    os.rename(os.path.join(tmp, "ck.train.safetensors"), os.path.join(tmp, "aside"))
    usage(a, SMALL + ["--max-steps", "4", "--save", ck, "--resume", "auto"], "ck.train.safetensors' does not")
    check(open(ck, "rb").read() == weights, "--resume auto changed the weights it refused")
    os.rename(os.path.join(tmp, "aside"), os.path.join(tmp, "ck.train.safetensors"))
    os.rename(ck, ck + ".aside")
    usage(a, SMALL + ["--max-steps", "4", "--save", ck, "--resume", "auto"], "ck.safetensors' does not")
    os.rename(ck + ".aside", ck)

    # Another optimizer: the reason is the optimizer state, not the data order.
    _, line = usage(a, SMALL + ["--resume", ck, "--optimizer", "sgd"], "--optimizer adam, this run has sgd")
    check("optimizer state" in line and "data order" not in line, f"wrong reason: {line}")
    _, line = usage(a, SMALL + ["--resume", ck, "--seed", "4"], "--seed")
    check("data order" in line, f"wrong reason for --seed: {line}")

    # --seed -1 used to wrap to 2^64-1.
    usage(a, SMALL + ["--seed", "-1"], "--seed must be an integer from 0")
    usage(a, SMALL + ["--seed", "18446744073709551616"], "--seed")
    p = ok([a.train] + SMALL + ["--max-steps", "1", "--seed", "18446744073709551615"])
    check("Checksums" in p.stdout, "the largest seed does not train")


def case_interrupted(a, tmp):
    ck = os.path.join(tmp, "ck.safetensors")
    common = [a.train] + SMALL + ["--log-every", "100", "--epochs", "3", "--save", ck]
    # What a save killed while writing leaves (names as write_safetensors makes them).
    stale = ["ck.safetensors.tmp.Ab12Cd", "ck.train.safetensors.tmp.xYz789", "ck.safetensors.pending",
             "ck.train.safetensors.pending.tmp.q1w2e3", "ck.best.safetensors.tmp.000000"]
    for f in stale:
        open(os.path.join(tmp, f), "wb").write(b"torn")
    open(os.path.join(tmp, "other.tmp.abcdef"), "wb").write(b"not ours")
    p = ok(common + ["--max-steps", "3"])
    left = sorted(os.listdir(tmp))
    check(left == ["ck.safetensors", "ck.train.safetensors", "other.tmp.abcdef"], f"after cleaning: {left}")
    for f in stale:
        check(f"Removed {os.path.join(tmp, f)}" in p.stdout, f"no log line for {f}:\n{p.stdout}")

    # A save killed between its two renames: the training state of step 6 is in place, its
    # weights still pending, the weights of step 3 beside them. The next start completes the
    # save, and the resumed run ends as an uninterrupted one.
    shutil.copy(ck, os.path.join(tmp, "weights3"))
    ok(common + ["--max-steps", "6", "--resume", ck])
    os.rename(ck, ck + ".pending")
    shutil.copy(os.path.join(tmp, "weights3"), ck)
    resumed = ok(common + ["--max-steps", "12", "--resume", "auto"])
    check("Completed the interrupted save of" in resumed.stdout and "at step 6" in resumed.stdout,
          f"the interrupted save was not completed:\n{resumed.stdout}")
    check(read_st(ck)[1]["step"] == "12", "the resumed run did not save step 12")
    full = ok([a.train] + SMALL + ["--log-every", "100", "--epochs", "3", "--max-steps", "12"])
    check(checksums(full.stdout) == checksums(resumed.stdout), "resuming after the recovery changed the result")


def read_until(p, needle, timeout=60):
    lines = []
    while True:
        r, _, _ = select.select([p.stdout], [], [], timeout)
        check(r, f"no '{needle}' within {timeout} s:\n" + "".join(lines))
        line = p.stdout.readline()
        check(line, f"output ended before '{needle}':\n" + "".join(lines))
        lines.append(line)
        if needle in line:
            return lines


def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def stop_and_resume(a, tmp, cmd, sig, expect_rc, env=None, as_slurm=False):
    """Sends `sig` once training runs; checks the exit code, the save and that resuming from it
    ends as an uninterrupted run would. as_slurm: as Slurm's time limit and scancel do, the signal
    comes again (SIGTERM, SIGCONT, SIGTERM), to the process and to each of its children."""
    ck = os.path.join(tmp, "stop.safetensors")
    p = subprocess.Popen(cmd + ["--save", ck], env=clean_env(env), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        lines = read_until(p, "Batch[3]")
        p.send_signal(sig)
        if as_slurm:
            time.sleep(0.005)
            for pid in [p.pid] + children(p.pid):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, sig)
        t0 = time.monotonic()
        rc = p.wait(timeout=60)
        elapsed = time.monotonic() - t0
        lines += p.stdout.readlines()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = "".join(lines)
    check(rc == expect_rc, f"exit code {rc} after {sig!r}, expected {expect_rc}:\n{text[-3000:]}")
    m = re.search(r"Stopped by signal (\d+) at step (\d+): saved", text)
    check(m and int(m.group(1)) == int(sig), f"no 'Stopped by signal' line:\n{text[-3000:]}")
    step = int(m.group(2))
    check(read_st(ck)[1]["step"] == str(step), f"the checkpoint is not of step {step}")
    check(elapsed < 10, f"took {elapsed:.1f} s to stop (launch's default grace is 10 s)")
    return ck, step, elapsed


def case_stop(a, tmp):
    # Ctrl-C of a single process: saved at the next step boundary, exit 130.
    base = SMALL + ["--log-every", "1", "--epochs", "3", "--max-steps", "40"]
    ck, step, dt = stop_and_resume(a, tmp, [a.train] + base, signal.SIGINT, 130)
    resumed = ok([a.train] + base + ["--resume", ck])
    full = ok([a.train] + base)
    check(checksums(resumed.stdout) == checksums(full.stdout), "resuming after Ctrl-C changed the result")
    print(f"SIGINT: saved step {step}, exited 130 after {dt:.2f} s; the resumed run matches an uninterrupted one")
    # A repeated SIGTERM is the same request (Slurm: SIGTERM, SIGCONT, SIGTERM): one save, 143.
    ck, step, dt = stop_and_resume(a, tmp, [a.train] + base, signal.SIGTERM, 143, as_slurm=True)
    resumed = ok([a.train] + base + ["--resume", ck])
    check(checksums(resumed.stdout) == checksums(full.stdout), "resuming after a repeated SIGTERM changed the result")
    print(f"SIGTERM twice: saved step {step}, exited 143 after {dt:.2f} s; the resumed run matches an uninterrupted one")

    if not os.access(a.launch, os.X_OK):
        print(f"skipped the launcher part: {a.launch} is not built")
        return SKIP
    # SIGTERM to `launch` (its teardown, as Slurm's): both ranks stop at the same step, rank 0
    # saves, launch exits 143 within its grace.
    logs = os.path.join(tmp, "logs")
    cmd = [a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", logs, a.train] + base
    # As scancel and Slurm's time limit: SIGTERM to launch and to each worker, twice.
    ck, step, dt = stop_and_resume(a, tmp, cmd, signal.SIGTERM, 143, as_slurm=True)
    resumed = ok([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", logs + "2", "--stream", "all",
                  a.train] + base + ["--resume", ck])
    full = ok([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", logs + "3", "--stream", "all",
               a.train] + base)
    check(checksums(resumed.stdout) and checksums(resumed.stdout) == checksums(full.stdout),
          "resuming after SIGTERM changed the result")
    print(f"SIGTERM twice to launch and its workers (2 ranks): saved step {step}, exited 143 after {dt:.2f} s; "
          "resumed = uninterrupted")


def case_tee(a, tmp):
    """Ctrl-C through `launch ... | tee` (issue 25): the SIGINT that stops the job ends tee too, so
    the hint to resume has no reader on stdout; launch repeats rank 0's last lines on stderr."""
    if not os.access(a.launch, os.X_OK):
        print(f"SKIPPED: {a.launch} is not built")
        return SKIP
    ck = os.path.join(tmp, "tee.safetensors")
    cmd = [a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", os.path.join(tmp, "logs"), a.train] + \
        SMALL + ["--log-every", "1", "--epochs", "3", "--max-steps", "40", "--save", ck]
    p = subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        read_until(p, "Batch[3]")
        p.stdout.close()  # tee, gone with the Ctrl-C
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=60)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    check(rc == 130, f"exit {rc} after SIGINT, expected 130:\n{err[-3000:]}")
    hint = [l for l in err.splitlines() if "[rank 0] Stopped by signal 2" in l and "continue with --resume " + ck in l]
    check(hint, f"no resume hint on stderr:\n{err[-3000:]}")
    print(f"Ctrl-C with stdout's reader gone: stderr repeats rank 0's last lines, '{hint[0].split('[rank 0] ')[1][:60]}...'")


def endpoint_ranks(a, tmp, args, env=None, n=2):
    """n ranks of `train_resnet args` on fixed endpoints (no launcher): rank 0's output piped
    (stdout and stderr together), the others' in files."""
    eps = ",".join(f"127.0.0.1:{free_port()}" for _ in range(n))
    procs = []
    for r in range(n):
        e = clean_env({**(env or {}), "PADDLE_TRAINER_ID": str(r), "PADDLE_TRAINERS_NUM": str(n),
                       "PADDLE_TRAINER_ENDPOINTS": eps})
        out = subprocess.PIPE if r == 0 else open(os.path.join(tmp, f"rank{r}.log"), "w")
        procs.append(subprocess.Popen([a.train] + args, env=e, stdout=out, stderr=subprocess.STDOUT, text=True))
    return procs


def finish(procs, timeout=90):
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def case_one_rank(a, tmp):
    # ZeRO-1: every rank gathers its optimizer shard into rank 0's checkpoint, so a rank that
    # acted at another step than the others would break the run (ranks out of step, exit 1 or 86).
    ck = os.path.join(tmp, "one.safetensors")
    base = SMALL + ["--log-every", "1", "--epochs", "3", "--max-steps", "40", "--zero", "1"]
    procs = endpoint_ranks(a, tmp, base + ["--save", ck], {"LAUNCH_CHECKPOINT_SIGNAL": "USR1"})
    try:
        lines = read_until(procs[0], "Batch[3]")
        procs[1].send_signal(signal.SIGUSR1)  # rank 1 only
        lines += read_until(procs[0], "(checkpoint signal)")
        saved = int(re.search(r"Saved \S+ at step (\d+) \(checkpoint signal\)", lines[-1]).group(1))
        saved_state = read_st(ck)[1]
        procs[1].send_signal(signal.SIGTERM)  # rank 1 only
        rcs = finish(procs)
        lines += procs[0].stdout.readlines()
    finally:
        finish(procs, 1)
    text = "".join(lines)
    rank1 = open(os.path.join(tmp, "rank1.log")).read()
    check(rcs == [143, 143], f"exit codes {rcs} (want 143 for both):\n{text[-2000:]}\nrank 1:\n{rank1[-2000:]}")
    check(text.count("(checkpoint signal)") == 1, "not exactly one save on one checkpoint signal:\n" + text[-3000:])
    check(saved_state["step"] == str(saved), f"the signal's checkpoint is of step {saved_state['step']}, not {saved}")
    m = re.search(r"Stopped by signal 15 at step (\d+): saved", text)
    check(m and int(m.group(1)) > saved, f"no 'Stopped by signal 15' line after the save:\n{text[-3000:]}")
    stopped = int(m.group(1))
    check(read_st(ck)[1]["step"] == str(stopped), f"the checkpoint is not of step {stopped}")
    # Both ranks stopped at that step: resumed on two ranks, the run ends as an uninterrupted one.
    resumed = endpoint_ranks(a, tmp, base + ["--resume", ck])
    full = endpoint_ranks(a, tmp, base)
    r_out, f_out = resumed[0].communicate(timeout=120)[0], full[0].communicate(timeout=120)[0]
    check(finish(resumed) == [0, 0] and finish(full) == [0, 0], "the resumed or the uninterrupted run failed")
    check(checksums(r_out) and checksums(r_out) == checksums(f_out),
          f"resuming changed the result:\n{r_out[-1500:]}\n{f_out[-1500:]}")
    print(f"signals to rank 1 alone (2 ranks, ZeRO-1): USR1 saved step {saved} once, SIGTERM stopped both at step "
          f"{stopped} (exit 143); resumed = uninterrupted")


def case_slow_save(a, tmp):
    # Every write of rank 0 (two checkpoints, the best weights) takes 2 x --comm-timeout while
    # rank 1 waits; none counts as silence.
    ck = os.path.join(tmp, "slow.safetensors")
    delay_s, timeout_s = 3.0, 1.5
    args = SMALL + ["--log-every", "1", "--max-steps", "4", "--save-every", "4", "--save", ck, "--val-samples", "16",
                    "--save-best", "--comm-timeout", str(timeout_s)]
    t0 = time.monotonic()
    procs = endpoint_ranks(a, tmp, args, {"WORKER_TEST_SAVE_DELAY_MS": str(int(delay_s * 1000))})
    try:
        out = procs[0].communicate(timeout=120)[0]
        rcs = finish(procs)
    finally:
        finish(procs, 1)
    elapsed = time.monotonic() - t0
    rank1 = open(os.path.join(tmp, "rank1.log")).read()
    check(rcs == [0, 0], f"exit codes {rcs}:\n{out[-2000:]}\nrank 1:\n{rank1[-2000:]}")
    # The scheduled save of step 4 says nothing; the best weights and the final save do.
    check(out.count("Saved ") == 2 and "(best top-1 so far)" in out, f"expected the best and the final save:\n{out[-2000:]}")
    writes = 3
    check(elapsed >= writes * delay_s, f"{elapsed:.1f} s in all: the writes were not slowed")
    check(read_st(ck)[1]["step"] == "4", "the checkpoint is not of step 4")
    print(f"2 ranks, --comm-timeout {timeout_s} s, 3 writes of rank 0 of {delay_s} s each: exit 0 in {elapsed:.1f} s")


def case_save_once(a, tmp):
    # The final save of a step that a scheduled save has just written is not written again
    # (each write of rank 0 is slowed by delay_s: two writes take at least twice as long).
    ck = os.path.join(tmp, "once.safetensors")
    delay_s = 2.5
    env = {"WORKER_TEST_SAVE_DELAY_MS": str(int(delay_s * 1000))}
    t0 = time.monotonic()
    p = run([a.train] + SMALL + ["--max-steps", "4", "--save-every", "4", "--save", ck], env)
    elapsed = time.monotonic() - t0
    check(p.returncode == 0, f"exit {p.returncode}: {p.stderr[-2000:]}")
    check(read_st(ck)[1]["step"] == "4", "the checkpoint is not of step 4")
    check(delay_s <= elapsed < 2 * delay_s, f"{elapsed:.1f} s: expected one write of {delay_s} s, not two")
    print(f"--max-steps 4 --save-every 4: one write of step 4 ({elapsed:.1f} s with writes of {delay_s} s)")


def st_layout(path):
    """(raw bytes, header dict, start of the data section) of a safetensors file."""
    raw = bytearray(open(path, "rb").read())
    (n,) = struct.unpack("<Q", raw[:8])
    return raw, json.loads(raw[8:8 + n]), 8 + n


def case_integrity(a, tmp):
    """Issue 22, item 6: a checksum per tensor, checked on load; a non-finite weight named at load."""
    ck = os.path.join(tmp, "ck.safetensors")
    ok([a.train] + SMALL + ["--max-steps", "2", "--save", ck])
    meta = read_st(ck)[1]
    check(len([k for k in meta if k.startswith("xxh3_64.")]) == len(read_st(ck)[0]), f"not a checksum per tensor: {meta}")

    def refused(args, needles):
        t0 = time.monotonic()
        p = run([a.train] + SMALL + ["--max-steps", "4"] + args)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 1 and len(lines) == 1 and all(n in lines[0] for n in needles) and "Epoch[" not in p.stdout,
              f"{args}: exit {p.returncode}, want 1 and one line with {needles}: {p.stderr[-800:]}")
        return lines[0], time.monotonic() - t0

    # One flipped bit in the middle of a tensor's bytes, in each file of the checkpoint.
    figures = []
    for path, tensor in [(ck, "layer2.0.conv1.weight"), (os.path.join(tmp, "ck.train.safetensors"), "optimizer.exp_avg")]:
        good = bytes(open(path, "rb").read())
        raw, header, data = st_layout(path)
        b, e = header[tensor]["data_offsets"]
        raw[data + (b + e) // 2] ^= 0x10
        open(path, "wb").write(raw)
        line, secs = refused(["--resume", ck], [path, f"tensor '{tensor}'", "do not match the checksum"])
        figures.append(f"{os.path.basename(path)}: refused in {secs:.2f} s")
        open(path, "wb").write(good)
    ok([a.train] + SMALL + ["--max-steps", "3", "--resume", ck])  # restored: it resumes

    # A NaN weight (a file whose checksums agree with it: another writer's, without any), and an
    # inf in the optimizer state: named at load, not later as "training diverged".
    w, meta = read_st(ck)
    w = {k: v.copy() for k, v in w.items()}
    w["layer3.1.bn2.weight"][3] = np.nan
    nan_w = os.path.join(tmp, "nan.safetensors")
    write_st(nan_w, w)
    refused(["--init", nan_w], [nan_w, "tensor 'layer3.1.bn2.weight' holds NaN"])
    raw, header, data = st_layout(ck)
    header["__metadata__"] = {k: v for k, v in header["__metadata__"].items() if not k.startswith("xxh3_64.")}
    b, _ = header["fc.bias"]["data_offsets"]
    raw[data + b:data + b + 4] = struct.pack("<f", float("nan"))
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(ck, "wb").write(struct.pack("<Q", len(h)) + h + raw[data:])
    line, _ = refused(["--resume", ck], [ck, "tensor 'fc.bias' holds NaN", "diverged"])
    check("lower --lr" in line and "loss is" not in line, line)
    print("integrity: a flipped bit in " + ", ".join(figures) + "; NaN weights refused at load, naming file and tensor")


if __name__ == "__main__":
    sys.exit(main(globals()))
