#!/usr/bin/python3
"""Integration tests of train_resnet (and of train_resnet under `launch --devices cpu`).

Usage: test_train_resnet.py CASE --train PATH --launch PATH
Cases: errors, resume, dump, torchvision, ddp, equivalence. Exit 0 pass, 1 fail, 77 skipped
(ctest's SKIP_RETURN_CODE): `launch` not built yet, or torch missing for the torchvision case.
Every child runs with a timeout; nets are tiny (ResNet-18 at width 8-16, 32x32 images).
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

SKIP = 77
SMALL = ["--depth", "18", "--width", "8", "--image-size", "32", "--num-classes", "10",
         "--batch-size", "8", "--num-samples", "128", "--threads", "1", "--data", "learnable"]
DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "BF16": np.uint16, "F16": np.float16}


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLE_", "LAUNCH_", "FLAGS_")) and k not in ("LOCAL_RANK",)}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


def run(cmd, env=None, timeout=150):
    p = subprocess.run(cmd, env=clean_env(env), capture_output=True, text=True, timeout=timeout)
    return p


def ok(cmd, env=None, timeout=150):
    p = run(cmd, env, timeout)
    check(p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out, meta


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        shape = list(a.shape)  # before ascontiguousarray, which turns 0-d into 1-d
        a = np.ascontiguousarray(a)
        dt = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}[a.dtype]
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def losses(metrics_path):
    with open(metrics_path) as f:
        return {j["step"]: j["loss"] for j in map(json.loads, f) if "loss" in j}


def checksums(text):
    return dict(re.findall(r"rank (\d+): params checksum (\S+)", text))


# --- cases

def case_errors(a, tmp):
    def usage(args, needle, code=2, env=None):
        p = run([a.train] + args, env)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == code, f"{args}: exit {p.returncode}, expected {code}; stderr: {p.stderr}")
        check(len(lines) == 1 and lines[0].startswith("train_resnet: error:"), f"{args}: stderr not one error line: {p.stderr!r}")
        check(needle in lines[0], f"{args}: '{needle}' not in '{lines[0]}'")

    usage(["--depth", "20"], "--depth 20")
    usage(["--batch-size", "0"], "--batch-size")
    usage(["--device", "cpu", "--precision", "bf16"], "fp32")
    usage(["--optimizer", "lamb"], "--optimizer")
    usage(["--lr", "-1"], "--lr")
    usage(["--save-every", "2"], "--save-every")
    usage(["--bogus"], "--bogus")
    usage(SMALL + ["--num-samples", "4"], "--num-samples 4")
    usage(SMALL, "PADDLE_TRAINER_ID=3", env={"PADDLE_TRAINER_ID": "3", "PADDLE_TRAINERS_NUM": "2"})
    usage(SMALL, "LAUNCH_STORE_ADDR", env={"PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "2"})
    # A knob (worker/core/knobs.h) is read at start-up, on the CPU backend too: a bad value is
    # named before any work.
    usage(SMALL, "WORKER_MEM_REPORT='yes' is not 0 or 1", env={"WORKER_MEM_REPORT": "yes"})
    usage(SMALL, "WORKER_CUDNN_WORKSPACE_MB='12abc'", env={"WORKER_CUDNN_WORKSPACE_MB": "12abc"})
    # Refused before the data: a folder that is not there is not what the error names.
    usage(["--cuda-graph", "on", "--data", os.path.join(tmp, "no-such-folder")], "--cuda-graph on")

    good = os.path.join(tmp, "good.safetensors")
    ok([a.train] + SMALL + ["--max-steps", "2", "--save", good])
    check(sorted(os.listdir(tmp)) == ["good.safetensors", "good.train.safetensors"],
          f"unexpected files after saving: {os.listdir(tmp)}")
    missing = os.path.join(tmp, "missing.safetensors")
    usage(SMALL + ["--init", missing], missing, code=1)

    trunc = os.path.join(tmp, "trunc.safetensors")
    with open(good, "rb") as f:
        raw = f.read()
    with open(trunc, "wb") as f:
        f.write(raw[: len(raw) // 2])
    usage(SMALL + ["--init", trunc], trunc, code=1)

    usage([x if x != "8" else "16" for x in SMALL[:4]] + SMALL[4:] + ["--init", good], "conv1.weight", code=1)

    t, _ = read_st(good)
    t = dict(t)
    t["fc.weightX"] = t.pop("fc.weight")
    renamed = os.path.join(tmp, "renamed.safetensors")
    write_st(renamed, t)
    usage(SMALL + ["--init", renamed], "fc.weight", code=1)

    lonely = os.path.join(tmp, "lonely.safetensors")
    shutil.copy(good, lonely)
    usage(SMALL + ["--resume", lonely], "lonely.train.safetensors", code=1)
    usage(SMALL + ["--resume", good, "--seed", "5"], "--seed", code=2)
    usage(SMALL + ["--resume", good, "--optimizer", "sgd"], "--optimizer", code=2)

    # A --save whose folder cannot exist (a file has that name) is refused before training
    # (issue 12: it used to fail after the whole run) and leaves nothing behind.
    bad = os.path.join(good, "c.safetensors")
    usage(SMALL + ["--max-steps", "1", "--save", bad], good, code=2)
    check(not any(".tmp" in f for f in os.listdir(tmp)), f"temporary files left: {os.listdir(tmp)}")
    # A missing folder is created (as in `--save ckpt/$SLURM_JOB_ID`).
    nested = os.path.join(tmp, "new", "dir", "c")
    ok([a.train] + SMALL + ["--max-steps", "1", "--save", nested])
    check(sorted(os.listdir(os.path.dirname(nested))) == ["c", "c.train.safetensors"], "nested save")


def case_resume(a, tmp):
    for opt in (["--optimizer", "adam"], ["--optimizer", "sgd", "--lr", "0.05", "--weight-decay", "1e-4", "--accum-steps", "2"]):
        common = [a.train] + SMALL + opt + ["--log-every", "1", "--epochs", "3"]
        full = ok(common + ["--max-steps", "20", "--metrics-file", f"{tmp}/full.jsonl"])
        ck = f"{tmp}/ck.safetensors"
        ok(common + ["--max-steps", "7", "--save", ck, "--metrics-file", f"{tmp}/part1.jsonl"])
        rest = ok(common + ["--max-steps", "20", "--resume", ck, "--metrics-file", f"{tmp}/part2.jsonl"])
        lf, l1, l2 = losses(f"{tmp}/full.jsonl"), losses(f"{tmp}/part1.jsonl"), losses(f"{tmp}/part2.jsonl")
        steps_per_epoch = 128 // (8 * int(opt[opt.index("--accum-steps") + 1]) if "--accum-steps" in opt else 128 // 8)
        check(len(lf) == 20 and sorted(l1) == list(range(7)) and sorted(l2) == list(range(7, 20)),
              f"unexpected logged steps: {sorted(lf)} {sorted(l1)} {sorted(l2)}")
        check(20 > steps_per_epoch, "the run should cross an epoch boundary")
        for s in range(20):
            got = l1[s] if s < 7 else l2[s]
            check(got == lf[s], f"{opt}: step {s}: loss {got} after resume, {lf[s]} uninterrupted")
        check(checksums(full.stdout) == checksums(rest.stdout),
              f"final parameters differ: {checksums(full.stdout)} vs {checksums(rest.stdout)}")
        check(lf[19] < lf[0], f"loss did not fall: {lf[0]} -> {lf[19]}")

    # --resume auto: starts fresh when --save does not exist yet, continues when it does.
    common = [a.train] + SMALL + ["--log-every", "5", "--epochs", "3"]
    auto = f"{tmp}/auto.safetensors"
    ok(common + ["--max-steps", "6", "--save", auto, "--save-every", "4", "--resume", "auto"])
    _, meta = read_st(auto)
    check(meta.get("step") == "6", f"--save after 6 steps holds step {meta.get('step')}")
    second = ok(common + ["--max-steps", "20", "--save", auto, "--resume", "auto"])
    check("Resuming from" in second.stdout, "--resume auto did not resume")
    full = ok(common + ["--max-steps", "20"])
    check(checksums(full.stdout) == checksums(second.stdout), "--resume auto changed the final parameters")


def case_dump(a, tmp):
    p1, p2, p3 = f"{tmp}/b1.safetensors", f"{tmp}/b2.safetensors", f"{tmp}/b3.safetensors"
    ok([a.train] + SMALL + ["--max-steps", "1", "--dump-batch", p1])
    ok([a.train] + SMALL + ["--max-steps", "1", "--dump-batch", p2])
    ok([a.train] + SMALL + ["--max-steps", "1", "--dump-batch", p3, "--seed", "3"])
    t1, meta = read_st(p1)
    t2, _ = read_st(p2)
    t3, _ = read_st(p3)
    check(t1["images"].shape == (8, 32, 32, 3) and t1["images"].dtype == np.float32, f"images {t1['images'].shape}")
    check(t1["labels"].shape == (8,) and t1["labels"].dtype == np.int64, "labels shape/dtype")
    check(((t1["labels"] >= 0) & (t1["labels"] < 10)).all(), "labels out of range")
    check(meta.get("layout") == "NHWC", f"layout metadata {meta}")
    check(np.array_equal(t1["images"], t2["images"]) and np.array_equal(t1["labels"], t2["labels"]),
          "the same seed gave a different batch")
    check(not np.array_equal(t1["images"], t3["images"]), "another seed gave the same batch")
    check(abs(float(t1["images"].std()) - 1.0) < 0.5, f"image statistics look wrong: std {t1['images'].std()}")


def case_torchvision(a, tmp):
    try:
        import torch
        import torchvision
    except ImportError:
        print("skipped: /usr/bin/python3 has no torch/torchvision")
        return SKIP
    ours = f"{tmp}/ours.safetensors"
    ok([a.train, "--depth", "18", "--num-classes", "10", "--image-size", "32", "--batch-size", "2",
        "--num-samples", "4", "--max-steps", "1", "--threads", "1", "--save", ours])
    t, _ = read_st(ours)
    m = torchvision.models.resnet18(num_classes=10)
    m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in t.items()}, strict=True)
    check(int(m.bn1.num_batches_tracked) == 1, "num_batches_tracked not saved")
    theirs = f"{tmp}/theirs.safetensors"
    write_st(theirs, {k: v.detach().numpy() for k, v in torchvision.models.resnet18(num_classes=10).state_dict().items()})
    ok([a.train, "--depth", "18", "--num-classes", "10", "--image-size", "32", "--batch-size", "2",
        "--num-samples", "4", "--max-steps", "1", "--threads", "1", "--init", theirs])


def case_signal(a, tmp):
    """LAUNCH_CHECKPOINT_SIGNAL: the signal makes rank 0 save at the next step boundary and go on."""
    import select
    import signal
    ck = f"{tmp}/sig.safetensors"
    cmd = [a.train] + SMALL + ["--max-steps", "40", "--epochs", "10", "--log-every", "1", "--save", ck]
    p = subprocess.Popen(cmd, env=clean_env({"LAUNCH_CHECKPOINT_SIGNAL": "USR2"}), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    seen, sent = [], False
    try:
        while True:
            r, _, _ = select.select([p.stdout], [], [], 60)
            check(r, "train_resnet went silent for 60 s")
            line = p.stdout.readline()
            if not line:
                break
            seen.append(line)
            if not sent and "Batch[3]" in line:
                p.send_signal(signal.SIGUSR2)
                sent = True
        check(p.wait(timeout=60) == 0, "train_resnet failed:\n" + "".join(seen))
    finally:
        if p.poll() is None:
            p.kill()
    text = "".join(seen)
    m = re.search(r"Saved \S+ at step (\d+) \(checkpoint signal\)", text)
    check(m, "no save on the checkpoint signal:\n" + text)
    check(4 <= int(m.group(1)) < 40, f"saved at step {m.group(1)}")
    check("Epoch[" in text.split("(checkpoint signal)")[1], "training did not go on after the signal save")
    usage = run([a.train] + SMALL, env={"LAUNCH_CHECKPOINT_SIGNAL": "USR2"})
    check(usage.returncode == 2 and "--save" in usage.stderr, f"signal without --save: {usage.stderr}")


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def case_peer_dies(a, tmp):
    """Two ranks on fixed endpoints (no launcher); SIGKILL rank 1 mid-training: rank 0 exits
    within seconds with one error line naming rank 1, and says it lost rank 1 the way launch
    reads it (a LAUNCH_PEER_LOST line, exit code 86: proto/peer_lost.h)."""
    import select
    import signal
    import time
    eps = ",".join(f"127.0.0.1:{free_port()}" for _ in range(2))
    cmd = [a.train] + SMALL + ["--max-steps", "100000", "--epochs", "100000", "--log-every", "1"]
    procs = []
    for r in range(2):
        env = clean_env({"PADDLE_TRAINER_ID": str(r), "PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ENDPOINTS": eps})
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        lines = []
        while not any("Batch[3]" in l for l in lines):
            r, _, _ = select.select([procs[0].stdout], [], [], 60)
            check(r, "rank 0 went silent for 60 s")
            line = procs[0].stdout.readline()
            if not line:
                raise Failure("rank 0 stopped before step 3: " + procs[0].stderr.read())
            lines.append(line)
        procs[1].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        rc = procs[0].wait(timeout=30)
        elapsed = time.monotonic() - t0
        err = procs[0].stderr.read().strip().splitlines()
        check(rc == 86, f"rank 0 exited {rc} after its peer died (86: it lost a peer)")
        check(len(err) == 2 and err[0].startswith("train_resnet: error: rank 0:") and "rank 1 (" in err[0],
              f"rank 0's error does not name rank 1: {err}")
        check(err[1].startswith("LAUNCH_PEER_LOST rank=1: "), f"rank 0 does not report its lost peer: {err}")
        check(elapsed < 10, f"rank 0 took {elapsed:.1f} s to notice")
        print(f"rank 0 exited {elapsed:.2f} s after rank 1 was killed: {err[0]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def launch_run(a, tmp, n, args, name, env=None):
    logs = f"{tmp}/{name}"
    cmd = [a.launch, "--devices", "cpu", "--nproc_per_node", str(n), "--log_dir", logs, "--stream", "all",
           a.train] + args
    p = ok(cmd, env=env, timeout=170)
    text = p.stdout + p.stderr
    if os.path.isdir(logs):
        for f in sorted(os.listdir(logs)):
            with open(os.path.join(logs, f), errors="replace") as fh:
                text += fh.read()
    return p, text


def check_peak_memory(metrics_path, text, n, report):
    with open(metrics_path) as f:
        fin = [j for j in map(json.loads, f) if j.get("final")]
    check(len(fin) == 1, f"{n} ranks: expected one final metrics record, got {len(fin)}")
    fin = fin[0]
    check(fin.get("world") == n and fin.get("peak_bytes", 0) > 0 and fin.get("peak_bytes_max_rank", 0) >= fin["peak_bytes"],
          f"{n} ranks: final record without a sane peak: {fin}")
    m = re.search(r"Peak device memory: [0-9.]+ GB \(rank 0, ([0-9]+) bytes\)", text)
    check(m and int(m.group(1)) == fin["peak_bytes"], f"{n} ranks: no 'Peak device memory' line matching the metrics")
    if not report:
        check("Memory (rank 0" not in text, "memory breakdown printed without WORKER_MEM_REPORT")
        return
    block = text[text.index("Memory (rank 0"):] if "Memory (rank 0" in text else ""
    items = dict(re.findall(r"^  ([a-zA-Z][^:\n]*): ([0-9.]+) MB$", block, re.M))
    for k in ("params fp32", "grads fp32", "activations kept for backward", "activation-gradient scratch",
              "optimizer state", "other"):
        check(k in items, f"memory breakdown lacks '{k}': {items}")
    total = sum(float(v) for v in items.values())
    # Each item is rounded to 0.1 MB; a total above the peak means something is counted twice.
    check(float(items["activations kept for backward"]) > 0 and abs(total - fin["peak_bytes"] / 1e6) <= 0.05 * len(items) + 1e-9,
          f"breakdown adds up to {total:.1f} MB, peak {fin['peak_bytes'] / 1e6:.1f} MB: {items}")


def case_ddp(a, tmp):
    if not os.access(a.launch, os.X_OK):
        print(f"skipped: {a.launch} is not built")
        return SKIP
    args = ["--depth", "18", "--width", "16", "--image-size", "32", "--num-classes", "10", "--data", "learnable",
            "--batch-size", "16", "--num-samples", "480", "--max-steps", "30", "--log-every", "5", "--threads", "1"]
    for n in (1, 2, 3):
        # WORKER_MEM_REPORT=1 (one run): the memory breakdown is printed and adds up to the peak.
        os.environ["WORKER_MEM_REPORT"] = "1" if n == 2 else "0"
        try:
            p, text = launch_run(a, tmp, n, args + ["--metrics-file", f"{tmp}/m{n}.jsonl"], f"logs{n}")
        finally:
            os.environ.pop("WORKER_MEM_REPORT", None)
        check_peak_memory(f"{tmp}/m{n}.jsonl", text, n, report=n == 2)
        cs = checksums(text)
        check(sorted(cs) == [str(r) for r in range(n)], f"{n} ranks: checksum lines of ranks {sorted(cs)}:\n{text[-3000:]}")
        check(len(set(cs.values())) == 1, f"{n} ranks: checksums differ: {cs}")
        check(f"Checksums: all {n} rank(s) agree" in text, f"{n} ranks: no agreement line")
        check(re.search(r"Epoch\[0\], Batch\[0\], Loss: [0-9.]+", text), "no guide log line")
        ls = losses(f"{tmp}/m{n}.jsonl")
        first, last = ls[min(ls)], ls[max(ls)]
        check(last < 0.5 * first, f"{n} ranks: loss fell only from {first} to {last}")
        print(f"{n} rank(s): loss {first:.4f} -> {last:.4f}, checksums agree")


def case_equivalence(a, tmp):
    if not os.access(a.launch, os.X_OK):
        print(f"skipped: {a.launch} is not built")
        return SKIP
    # Batch norm normalises over each rank's own batch, so "2 ranks x B" equals "1 rank x B with
    # 2 accumulated micro-batches" (the same BN batches, see worker/train/sampler.h), while
    # "1 rank x 2B" normalises over 2B samples and differs: it serves as the negative control.
    # Parameters are compared after ONE step: from the second forward on, rounding differences
    # (1e-8) can flip a ReLU mask or a max-pool choice of a value near a tie, which changes that
    # element's gradient outright and the parameters by ~1e-3 after a few steps (seen with
    # some seeds, even between --threads 1 and 2 of the same run). Losses are then compared over
    # three steps with a tolerance that such flips stay below (the effect grows with every step).
    args = ["--depth", "18", "--width", "16", "--image-size", "64", "--num-classes", "10", "--batch-size", "16",
            "--num-samples", "128", "--threads", "1", "--data", "learnable", "--optimizer", "sgd", "--lr", "0.01",
            "--log-every", "1"]
    variants = {"two": None, "one": ["--accum-steps", "2"], "big": ["--batch-size", "32"]}
    params, loss = {}, {}
    for name, extra in variants.items():
        for steps in (1, 3):
            out = f"{tmp}/{name}{steps}"
            cmd = args + ["--max-steps", str(steps), "--save", out + ".safetensors", "--metrics-file", out + ".jsonl"]
            if extra is None:
                launch_run(a, tmp, 2, cmd, f"{name}{steps}")
            else:
                ok([a.train] + cmd + extra)
        params[name] = read_st(f"{tmp}/{name}1.safetensors")[0]
        loss[name] = losses(f"{tmp}/{name}3.jsonl")

    def worst(x, y):
        return max((float(np.linalg.norm(x[k].astype(np.float64) - y[k]) / max(np.linalg.norm(y[k]), 1e-6)), k)
                   for k in x if "running" not in k and "num_batches" not in k)

    same, control = worst(params["two"], params["one"]), worst(params["two"], params["big"])
    check(same[0] < 1e-5, f"after one step, 2 ranks x B and 1 rank x B x 2 micro-batches differ: {same}")
    check(control[0] > 100 * same[0], f"the comparison is not sensitive: 1 rank x 2B differs by only {control}")
    lsame = max(abs(loss["two"][s] - loss["one"][s]) / loss["one"][s] for s in range(3))
    lcontrol = max(abs(loss["two"][s] - loss["big"][s]) / loss["big"][s] for s in range(3))
    check(lsame < 1e-3, f"losses of 2 ranks x B and 1 rank x B x 2 differ by {lsame:.1e} (relative)")
    check(lcontrol > 10 * lsame, f"losses of 1 rank x 2B are too close to be a control: {lcontrol:.1e}")
    print(f"2 ranks x 16 vs 1 rank x 16 x accum 2: parameters after 1 step {same[0]:.1e} ({same[1]}), "
          f"losses over 3 steps {lsame:.1e}; control 1 rank x 32: {control[0]:.1e}, losses {lcontrol:.1e}")


def main(cases=None, extra_args=()):
    """Runs `CASE --train PATH --launch PATH [extra_args]`: the function case_CASE of `cases`
    (a module's globals(), this module's by default) in a fresh temporary folder."""
    cases = cases or globals()
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--train", required=True)
    ap.add_argument("--launch", required=True)
    for flag in extra_args:
        ap.add_argument(flag, default="")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix=f"train_{a.case}_")
    try:
        rc = cases["case_" + a.case](a, tmp)
        if rc == SKIP:
            return SKIP
        print(f"{a.case}: passed")
        return 0
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"{a.case}: FAILED: {e}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
