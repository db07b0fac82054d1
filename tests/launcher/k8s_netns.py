#!/usr/bin/env python3
"""The manifests of examples/k8s/ run as Kubernetes would run them, without Kubernetes: each pod a
network-namespace "host" (scripts/netns_hosts.sh) with exactly the environment its operator gives
it, its command the manifest's (with $(VAR) expanded as the kubelet does), all pods started at
once, and the pods' names resolvable only after a delay (a Service gets its address once its pod
runs). The environments follow the operators' sources:

  PyTorchJob  kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go + master.go (+ elastic.go
              for the elastic one)
  TrainJob    kubeflow/trainer pkg/runtime/framework/plugins/torch/torch.go (EnforceMLPolicy)
  PaddleJob   kubeflow/training-operator pkg/controller.v1/paddlepaddle/envvar.go

Names resolve through /etc/hosts only: `ip netns exec NS` bind-mounts /etc/netns/NS/hosts over it
(when that file exists as the command starts), so each pod's file is made empty of the job's names
and appended to in place (the mount follows the inode, not the name) after the delay.

The training arguments after `train_resnet` are replaced by a tiny CPU run, and the per-node
process count set to 1 in the spec before the environment is derived from it (the operator would
give 8 for the manifests' GPU nodes; a CPU host of this test runs one process).

Usage: k8s_netns.py --launch PATH --train PATH [--case NAME ...] (K8S_NETNS_KEEP=1 keeps the pods'
folders and prints where). Needs root and `ip netns`;
exits 77 (skipped) otherwise. Every wait is bounded.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS = os.path.join(ROOT, "scripts", "netns_hosts.sh")
EXAMPLES = os.path.join(ROOT, "examples", "k8s")
TOKEN = "k8s-test-" + os.urandom(16).hex()  # what the Secret holds (examples/k8s/secret.sh)
DNS_DELAY_S = 1.5  # the Services' names resolve this long after the pods start
TINY = ["--depth", "18", "--width", "8", "--image-size", "32", "--batch-size", "4", "--num-samples", "32",
        "--max-steps", "4", "--seed", "7", "--threads", "1", "--save-every", "2", "--resume", "auto"]


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(77)


# --- What each operator gives a pod ---------------------------------------------------------------

def container_env(container):
    """The container's own env, the Secret's value in place of its secretKeyRef."""
    env = {}
    for e in container.get("env", []):
        if "valueFrom" in e:
            assert e["valueFrom"]["secretKeyRef"]["name"] == "launch-token", e
            env[e["name"]] = TOKEN
        else:
            env[e["name"]] = str(e["value"])
    return env


def port_named(container, name, default):
    for p in container.get("ports", []):
        if p.get("name") == name:
            return p["containerPort"]
    return default


def pytorchjob_pods(job):
    """[(pod name, its address index, container, env)]: master-0 first, then worker-0.."""
    name, spec = job["metadata"]["name"], job["spec"]
    reps = spec["pytorchReplicaSpecs"]
    total = sum(r["replicas"] for r in reps.values())
    nproc = str(spec.get("nprocPerNode", "auto"))
    nproc_int = int(nproc) if nproc.isdigit() else 1  # getNprocPerNodeInt
    master = reps["Master"]["template"]["spec"]["containers"][0]
    port = port_named(master, "pytorchjob-port", 23456)
    pods = []
    for rtype in ("Master", "Worker"):
        c = reps[rtype]["template"]["spec"]["containers"][0]
        for i in range(reps[rtype]["replicas"]):
            rank = i + (1 if rtype == "Worker" else 0)
            env = container_env(c)
            env.update({"PYTHONUNBUFFERED": "0", "MASTER_PORT": str(port), "MASTER_ADDR": f"{name}-master-0",
                        "WORLD_SIZE": str(total * nproc_int), "RANK": str(rank), "PET_NPROC_PER_NODE": nproc,
                        "PET_NODE_RANK": str(rank), "PET_NNODES": str(total)})
            pods.append((f"{name}-{rtype.lower()}-{i}", c, env))
    return pods


def pytorchjob_elastic_pods(job):
    """Workers only, with an elasticPolicy: envvar.go's setPodEnv (no Master: no MASTER_*, RANK
    or PET_NODE_RANK; no PET_NNODES of its own) plus elastic.go's Generate."""
    name, spec = job["metadata"]["name"], job["spec"]
    policy = spec["elasticPolicy"]
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    c = worker["template"]["spec"]["containers"][0]
    port = policy.get("rdzvPort") or port_named(c, "pytorchjob-port", 23456)
    host = policy.get("rdzvHost") or f"{name}-worker-0"
    elastic = {"PET_RDZV_ENDPOINT": f"{host}:{port}", "PET_RDZV_BACKEND": policy.get("rdzvBackend", "c10d")}
    if "minReplicas" in policy or "maxReplicas" in policy:
        elastic["PET_NNODES"] = f"{policy['minReplicas']}:{policy['maxReplicas']}"
    else:
        elastic["PET_NNODES"] = str(worker["replicas"])
    if "maxRestarts" in policy:
        elastic["PET_MAX_RESTARTS"] = str(policy["maxRestarts"])
    if "nProcPerNode" in policy:
        elastic["PET_NPROC_PER_NODE"] = str(policy["nProcPerNode"])
    if "rdzvId" in policy:
        elastic["PET_RDZV_ID"] = policy["rdzvId"]
    if policy.get("rdzvConf"):
        elastic["PET_RDZV_CONF"] = ",".join(f"{kv['key']}={kv['value']}" for kv in policy["rdzvConf"])
    pods = []
    for i in range(worker["replicas"]):
        env = container_env(c)
        env["PYTHONUNBUFFERED"] = "0"
        env.update(elastic)
        pods.append((f"{name}-worker-{i}", c, env))
    return pods


def trainjob_pods(job):
    name, trainer = job["metadata"]["name"], job["spec"]["trainer"]
    c = {"command": trainer["command"], "env": trainer.get("env", [])}
    pods = []
    for i in range(trainer["numNodes"]):
        env = container_env(c)
        env.update({"PET_NNODES": str(trainer["numNodes"]), "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
                    "PET_NODE_RANK": str(i),  # the Job completion index
                    "PET_MASTER_ADDR": f"{name}-node-0-0.{name}", "PET_MASTER_PORT": "29500"})
        pods.append((f"{name}-node-0-{i}.{name}", c, env))
    return pods


def paddlejob_pods(job, pod_ip):
    name = job["metadata"]["name"]
    worker = job["spec"]["paddleReplicaSpecs"]["Worker"]
    c = worker["template"]["spec"]["containers"][0]
    port = port_named(c, "master", 36543)
    pods = []
    for i in range(worker["replicas"]):
        env = container_env(c)
        env.update({"PYTHONUNBUFFERED": "1", "PADDLE_JOB_ID": name, "PADDLE_NNODES": str(worker["replicas"])})
        if i == 0:
            env["POD_IP_DUMMY"] = pod_ip(0)  # status.podIP
            env["PADDLE_MASTER"] = f"{pod_ip(0)}:{port}"
        else:
            env["PADDLE_MASTER"] = f"{name}-worker-0:{port}"
        pods.append((f"{name}-worker-{i}", c, env))
    return pods


def expand(arg, env):
    """The kubelet's $(VAR) expansion of command and args."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


# --- Running the pods -----------------------------------------------------------------------------

class Hosts:
    def __init__(self, n):
        self.prefix = f"lk{os.getpid()}x"
        self.env = dict(os.environ, NETNS_PREFIX=self.prefix)
        subprocess.run([HOSTS, "reap", "lk"], env=self.env, check=False, capture_output=True)
        r = subprocess.run([HOSTS, "up", str(n)], env=self.env, capture_output=True, text=True)
        if r.returncode == 77:
            skip(r.stderr.strip() or r.stdout.strip())
        if r.returncode != 0:
            raise RuntimeError("netns_hosts.sh up failed: " + r.stderr)
        self.n = n

    def ns(self, i):
        return f"{self.prefix}{i + 1}"

    def ip(self, i):
        return f"10.213.0.{i + 1}"

    def hosts_file(self, i):
        return f"/etc/netns/{self.ns(i)}/hosts"

    def reset_names(self):
        for i in range(self.n):
            os.makedirs(os.path.dirname(self.hosts_file(i)), exist_ok=True)
            with open(self.hosts_file(i), "w") as f:
                f.write("127.0.0.1 localhost\n::1 localhost\n")

    def publish(self, names_to_ip):
        lines = "".join(f"{ip} {name}\n" for name, ip in names_to_ip.items())
        for i in range(self.n):
            with open(self.hosts_file(i), "a") as f:  # in place: the bind mount holds this inode
                f.write(lines)

    def down(self):
        subprocess.run([HOSTS, "down"], env=self.env, check=False, capture_output=True)
        for i in range(self.n):
            shutil.rmtree(os.path.dirname(self.hosts_file(i)), ignore_errors=True)


def run_pods(hosts, pods, names_to_ip, args, work):
    hosts.reset_names()
    bindir = os.path.dirname(os.path.abspath(args.launch))
    procs = []
    for i, (pod, container, env) in enumerate(pods):
        command = [expand(a, env) for a in container["command"] + container.get("args", [])]
        assert command[0] == "launch", command
        at = command.index("train_resnet")
        command = [args.launch] + command[1:at] + [args.train] + TINY + [
            "--save", os.path.join(work, "ck.safetensors")]
        podenv = {"PATH": bindir + ":/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "HOSTNAME": pod.split(".")[0]}
        podenv.update(env)
        cwd = os.path.join(work, f"pod{i}")
        os.makedirs(cwd)
        out, err = open(os.path.join(cwd, "out"), "w"), open(os.path.join(cwd, "err"), "w")
        procs.append((pod, cwd, subprocess.Popen(
            ["ip", "netns", "exec", hosts.ns(i), "env", "-i"] + [f"{k}={v}" for k, v in podenv.items()] +
            ["timeout", "120"] + command, cwd=cwd, stdout=out, stderr=err)))
    timer = threading.Timer(DNS_DELAY_S, hosts.publish, [names_to_ip])
    timer.start()
    try:
        codes = [p.wait(timeout=150) for _, _, p in procs]
    finally:
        timer.cancel()
    return [(pod, cwd, code, open(os.path.join(cwd, "out")).read(), open(os.path.join(cwd, "err")).read())
            for (pod, cwd, _), code in zip(procs, codes)]


def check(case, results, expect_node, failures):
    for i, (pod, _, code, out, err) in enumerate(results):
        def fail(what):
            failures.append(f"{case}: pod {pod}: {what}; its last lines:\n" + "\n".join(err.splitlines()[-5:]))
        if code != 0:
            fail(f"exited with {code}")
            continue
        node = re.search(r"this is node (\d+) of (\d+)", err)
        if not node or int(node.group(2)) != len(results):
            fail("no 'this is node K of N' line")
        elif expect_node(i) is not None and int(node.group(1)) != expect_node(i):
            fail(f"is node {node.group(1)}, expected {expect_node(i)}")
        if i == 0 and "serving the job's store" not in err:
            fail("pod 0 did not serve the store")
        if i == 0 and "params checksum" not in out:
            fail("rank 0 printed no parameter checksum")
    if not any("does not resolve yet" in r[4] for r in results):
        failures.append(f"{case}: no pod waited for a name to resolve (the delay did not show)")
    nodes = sorted(int(re.search(r"this is node (\d+)", r[4]).group(1)) for r in results if r[2] == 0)
    if len(nodes) == len(results) and nodes != list(range(len(results))):
        failures.append(f"{case}: node ranks {nodes}")


def load(name):
    with open(os.path.join(EXAMPLES, name)) as f:
        job = yaml.safe_load(f)
    return job


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--case", action="append", choices=["pytorchjob", "pytorchjob-elastic", "trainjob", "paddlejob"])
    args = ap.parse_args()
    args.launch, args.train = os.path.abspath(args.launch), os.path.abspath(args.train)
    cases = args.case or ["pytorchjob", "pytorchjob-elastic", "trainjob", "paddlejob"]
    if os.geteuid() != 0:
        skip("not running as root (network namespaces and /etc/netns need it)")
    if not shutil.which("ip"):
        skip("the ip command (iproute2) is not installed")

    hosts = Hosts(3)
    failures = []
    work_root = tempfile.mkdtemp(prefix="launch-k8s-")
    try:
        for case in cases:
            work = os.path.join(work_root, case)
            os.makedirs(work)
            t0 = time.time()
            if case == "pytorchjob":
                job = load("pytorchjob.yaml")
                job["spec"]["nprocPerNode"] = "1"
                pods = pytorchjob_pods(job)
                names = {f"{job['metadata']['name']}-master-0": hosts.ip(0),
                         f"{job['metadata']['name']}-worker-0": hosts.ip(1)}
                expect = lambda i: i  # RANK / PET_NODE_RANK: master 0, worker 1
            elif case == "pytorchjob-elastic":
                job = load("pytorchjob-elastic.yaml")
                # The manifest's 30 s last call, shortened: MIN of MAX pods run here.
                job["spec"]["elasticPolicy"]["rdzvConf"] = [{"key": "last_call_timeout", "value": "1"}]
                pods = pytorchjob_elastic_pods(job)
                names = {f"{job['metadata']['name']}-worker-{i}": hosts.ip(i) for i in range(len(pods))}
                expect = lambda i: 0 if i == 0 else None  # no rank: worker 0 serves the store
            elif case == "trainjob":
                job = load("trainjob.yaml")
                job["spec"]["trainer"]["numProcPerNode"] = 1
                pods = trainjob_pods(job)
                names = {pod: hosts.ip(i) for i, (pod, _, _) in enumerate(pods)}
                expect = lambda i: i  # PET_NODE_RANK
            else:
                job = load("paddlejob.yaml")
                job["spec"]["paddleReplicaSpecs"]["Worker"]["replicas"] = 3
                pods = paddlejob_pods(job, hosts.ip)
                names = {f"{job['metadata']['name']}-worker-{i}": hosts.ip(i) for i in range(len(pods))}
                expect = lambda i: 0 if i == 0 else None  # no rank: the store's pod is node 0, then arrival
            results = run_pods(hosts, pods, names, args, work)
            before = len(failures)
            check(case, results, expect, failures)
            status = "PASS" if len(failures) == before else "FAIL"
            print(f"{status} {case}: {len(pods)} pods, names resolvable after {DNS_DELAY_S} s, all done in "
                  f"{time.time() - t0:.1f} s")
    finally:
        hosts.down()
        if os.environ.get("K8S_NETNS_KEEP") == "1":
            print("kept " + work_root)
        else:
            shutil.rmtree(work_root, ignore_errors=True)
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
