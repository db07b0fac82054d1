"""Real frameworks under the real `launch`: programs written for torchrun and paddle launch.

Usage: test_frameworks.py CASE --launch PATH --train PATH --paddle-python PATH
Cases:
  torch_ddp        gloo collectives + DDP on 2 CPU ranks (parameters agree), torchrun's contract
  torch_spellings  the same program started with torchrun's spellings (-m, --no-python, PET_*)
  torch_record     a failing @record rank: the report shows its exception from the error file
  paddle           paddle's init_parallel_env + DataParallel(resnet18) on 2 CPU ranks
  train_torchrun   train_resnet started with torchrun's variables only, as torchrun does
Exit 77 (ctest's SKIP_RETURN_CODE) when torch is not importable by /usr/bin/python3, or when
paddle's virtual environment is missing and SETUP_SKIP_PIP=1 said not to make it.
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch (the first python3 on PATH may lack it)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def clean_env(extra=None):
    """The test's environment without any launcher's variables (ctest may run under one)."""
    drop = ("PADDLE_", "LAUNCH_", "FLAGS_", "PET_", "TORCHELASTIC_", "SLURM_")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(drop) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                                                    "POD_IP", "PYTHON_EXEC")}
    env["OMP_NUM_THREADS"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""  # CPU ranks, also on a GPU machine
    env.update(extra or {})
    return env


def run(cmd, cwd, env=None, timeout=120):
    t0 = time.time()
    p = subprocess.run(cmd, cwd=cwd, env=clean_env(env), capture_output=True, text=True, timeout=timeout)
    print(f"$ {' '.join(cmd)}  -> exit {p.returncode} in {time.time() - t0:.1f} s")
    return p


def logs(d, n):
    return [open(os.path.join(d, f"workerlog.{r}")).read() for r in range(n)]


def ddp_ok(log_dir, how):
    """Both ranks of torch_ddp.py said ok with the same parameter fingerprint."""
    prints = [re.findall(r"rank (\d): ok (\S+)", text) for text in logs(log_dir, 2)]
    check(all(len(p) == 1 for p in prints), f"{how}: a rank did not finish: {prints}")
    check(prints[0][0][1] == prints[1][0][1], f"{how}: fingerprints differ: {prints}")


def torch_importable():
    return subprocess.run([PYTHON, "-c", "import torch.distributed"], capture_output=True).returncode == 0


# ---------------------------------------------------------------------------------------------

def case_torch_ddp(a, tmp):
    p = run([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--python", PYTHON, "--log_dir", f"{tmp}/log",
             os.path.join(HERE, "torch_ddp.py")], tmp)
    check(p.returncode == 0, f"exit {p.returncode}: {p.stderr[-3000:]}")
    ddp_ok(f"{tmp}/log", "launch --nproc_per_node 2")


def case_torch_spellings(a, tmp):
    # torchrun --standalone --nproc-per-node 2 --max-restarts 0 --log-dir ... -m module (PYTHON_EXEC).
    p = run([a.launch, "--standalone", "--nproc-per-node", "2", "--max-restarts", "0", "--rdzv-backend", "c10d",
             "--rdzv-id", "spelled", "--log-dir", f"{tmp}/a", "--tee", "3", "-m", "torch_ddp"],
            tmp, {"PYTHON_EXEC": PYTHON, "PYTHONPATH": HERE})
    check(p.returncode == 0, f"-m: exit {p.returncode}: {p.stderr[-3000:]}")
    ddp_ok(f"{tmp}/a", "-m torch_ddp")
    check("job spelled:" in p.stderr, "--rdzv-id did not name the job")
    check("[rank 1] rank 1: ok" in p.stdout, "--tee 3 did not show every rank's output")
    # PET_NPROC_PER_NODE (torchrun's environment form) and --no-python with the interpreter named.
    p = run([a.launch, "--no-python", "--log-dir", f"{tmp}/b", "--redirects", "3", PYTHON,
             os.path.join(HERE, "torch_ddp.py")], tmp, {"PET_NPROC_PER_NODE": "2"})
    check(p.returncode == 0, f"--no-python: exit {p.returncode}: {p.stderr[-3000:]}")
    ddp_ok(f"{tmp}/b", "PET_NPROC_PER_NODE=2 --no-python")
    check("ok" not in p.stdout, "--redirects 3 still showed output on the console")
    # The spellings launch cannot honour say what to use instead.
    p = run([a.launch, "--redirects", "1", "true"], tmp)
    check(p.returncode == 2 and "--redirects 3" in p.stderr, f"--redirects 1: {p.returncode} {p.stderr}")
    # torchrun's elastic range is elastic membership here too: it needs the endpoint.
    p = run([a.launch, "--nnodes", "1:4", "true"], tmp)
    check(p.returncode == 2 and "elastic membership) needs --master HOST:PORT or --rdzv-endpoint" in p.stderr,
          f"--nnodes 1:4: {p.returncode} {p.stderr}")


def case_torch_record(a, tmp):
    p = run([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--python", PYTHON, "--grace", "2",
             "--log_dir", f"{tmp}/log", os.path.join(HERE, "torch_record_failure.py")], tmp)
    check(p.returncode == 1, f"exit {p.returncode}, expected rank 1's 1: {p.stderr[-3000:]}")
    err = p.stderr
    report = err[err.index("failure report"):]
    check("root cause: rank 1 exited with code 1" in report, report)
    check("exception: ValueError: learning rate must be positive, got -1.0" in report, report)
    check("Traceback (most recent call last)" in report and "configure_optimizer" in report, report)
    check("shutting down, step 29 of 30" in report, "the log's tail is missing: " + report)
    tail = report[report.index("line(s) of this run"):]
    check("ValueError" not in tail, "the tail already held the exception: the test proves nothing")
    check(os.path.exists(f"{tmp}/log/workererror.1.json"), "no error file")


def case_paddle(a, tmp):
    if not os.access(a.paddle_python, os.X_OK):
        if os.environ.get("SETUP_SKIP_PIP") == "1":
            print(f"SKIPPED: {a.paddle_python} missing and SETUP_SKIP_PIP=1 (scripts/setup.sh makes it otherwise)")
            return 77
        raise AssertionError(f"{a.paddle_python} is missing: scripts/setup.sh installs paddlepaddle==3.3.1 there")
    p = run([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--python", a.paddle_python,
             "--log_dir", f"{tmp}/log", os.path.join(HERE, "paddle_dataparallel.py")], tmp, timeout=170)
    check(p.returncode == 0, f"exit {p.returncode}: {p.stderr[-3000:]}")
    prints = [re.findall(r"rank \d: params (\S+ \S+)", t) for t in logs(f"{tmp}/log", 2)]
    check(all(len(x) == 1 for x in prints) and prints[0] == prints[1], f"parameters differ: {prints}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_train_torchrun(a, tmp):
    small = ["--device", "cpu", "--depth", "18", "--width", "8", "--image-size", "16", "--num-classes", "4",
             "--data", "learnable", "--batch-size", "4", "--num-samples", "32", "--epochs", "1"]
    # Under launch: the reference.
    p = run([a.launch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", f"{tmp}/ref", a.train] + small, tmp)
    check(p.returncode == 0, f"launch: exit {p.returncode}: {p.stderr[-2000:]}")
    ref = re.findall(r"rank 0: params checksum (\S+ \S+ \S+)", p.stdout)
    check(len(ref) == 1, f"no checksum under launch: {p.stdout[-2000:]}")
    # As torchrun starts workers: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT only.
    port = free_port()
    procs = []
    for r in range(2):
        env = clean_env({"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1",
                         "MASTER_PORT": str(port)})
        procs.append(subprocess.Popen([a.train] + small, cwd=tmp, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [pr.communicate(timeout=120) for pr in procs]
    for r, (pr, (out, err)) in enumerate(zip(procs, outs)):
        check(pr.returncode == 0, f"torchrun-style rank {r}: exit {pr.returncode}: {err[-2000:]}")
    check("Checksums: all 2 rank(s) agree" in outs[0][0], outs[0][0][-2000:])
    got = re.findall(r"rank 0: params checksum (\S+ \S+ \S+)", outs[0][0])
    check(got == ref, f"torchrun-style training differs from launch's: {got} vs {ref}")
    # After an elastic join under torchrun the agents' restart counts differ (the new one counts from
    # 0, the others on), while rank 0's store on MASTER_PORT is new for the round: the ranks meet.
    port = free_port()
    procs = []
    for r in range(2):
        env = clean_env({"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1",
                         "MASTER_PORT": str(port), "TORCHELASTIC_RESTART_COUNT": str(1 - r)})
        procs.append(subprocess.Popen([a.train] + small + ["--comm-timeout", "30"], cwd=tmp, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [pr.communicate(timeout=120) for pr in procs]
    for r, (pr, (out, err)) in enumerate(zip(procs, outs)):
        check(pr.returncode == 0, f"restart counts 1 and 0, rank {r}: exit {pr.returncode}: {err[-2000:]}")
    got = re.findall(r"rank 0: params checksum (\S+ \S+ \S+)", outs[0][0])
    check(got == ref, f"restart counts 1 and 0: {got} vs {ref}")
    # torchrun's static rendezvous serves its own TCPStore on MASTER_PORT: refused, saying what to do.
    env = clean_env({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                     "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True"})
    p = subprocess.run([a.train] + small, cwd=tmp, env=env, capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--rdzv-backend c10d" in p.stderr, f"agent store: {p.returncode} {p.stderr}")


CASES = {"torch_ddp": case_torch_ddp, "torch_spellings": case_torch_spellings, "torch_record": case_torch_record,
         "paddle": case_paddle, "train_torchrun": case_train_torchrun}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--launch", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--paddle-python", required=True)
    a = ap.parse_args()
    if a.case.startswith("torch") and not torch_importable():
        print(f"SKIPPED: torch is not importable by {PYTHON} (scripts/setup.sh installs python3-torch)")
        return 77
    with tempfile.TemporaryDirectory(prefix="launch-fw-") as tmp:
        t0 = time.time()
        try:
            rc = CASES[a.case](a, tmp)
        except AssertionError as e:
            print(f"FAILED: {e}")
            return 1
        if rc == 77:
            return 77
        print(f"PASSED {a.case} in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
