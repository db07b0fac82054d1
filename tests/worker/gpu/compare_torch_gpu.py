"""Whole ResNet on the GPU against torchvision on the same GPU (run on the GPU machine).

gpu_model_driver (tests/worker/gpu) initialises the model, writes the weights and a batch as
safetensors, runs one training step on our GPU backend and writes the loss, every gradient, the
state after the forward (running statistics) and after one SGD step and one Adam step (each from
the same start). This script loads the same weights into torchvision's model on the GPU
(load_state_dict strict=True), repeats the step and compares; error of a tensor:
max|ours - torch| / max|torch|, worst element printed.

fp32: TF32 off on both sides (torch.backends.*.allow_tf32 = False; ours by default); loss,
gradients and states must agree within --tol (1e-4). bf16: torch.autocast(bfloat16) with
channels_last against our bf16 backend; the loss must agree within 1e-2; gradient errors are
printed (bf16 rounding of activations differs between two correct implementations).
Exit 77 when torch or CUDA is missing.
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import st  # noqa: E402  (tests/worker/python/st.py: safetensors with numpy only)

try:
    import numpy as np
    import torch
    import torchvision
except ImportError as e:
    print(f"SKIPPED: torch/torchvision not importable ({e})")
    sys.exit(77)

# Must match gpu_model_driver.cpp.
SGD = dict(lr=0.1, momentum=0.9, weight_decay=1e-4)
ADAM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4)
ADAM_NOISE = 1e-3  # see compare_torch.py: Adam's first step is lr*sign(g) where g is noise-level

# ResNet-50 with torchvision's default initialisation is ill-conditioned (see
# tests/worker/python/compare_torch.py: torch's own fp32 gradients differ from its fp64 ones
# by up to 40% in some tensors). As there, ResNet-50 starts from torchvision's weights with each
# bottleneck's last BN weight drawn from U(0.2, 0.5), and gradients and stepped parameters are
# compared per tensor in the L2 norm (a real mistake gives errors of order 1).
BN3_GAMMA = (0.2, 0.5)
TOL_L2 = 5e-2
TOL_ADAM_FLIPS = 1e-2  # as compare_torch.py


def l2_err(ours, ref):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.isfinite(ours).all():
        return float("inf")
    return float(np.linalg.norm(ours - ref) / max(np.linalg.norm(ref), 1e-30))


def rel_err(ours, ref):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    diff = np.abs(ours - ref)
    if not diff.size:
        return 0.0, 0, (0.0, 0.0)
    if not np.isfinite(ours).all():
        return float("inf"), 0, (float("nan"), 0.0)
    scale = max(np.abs(ref).max(), 1e-30)
    i = int(np.argmax(diff))
    return diff.max() / scale, i, (ours.flat[i], ref.flat[i])


class Report:
    def __init__(self):
        self.failures = []
        self.worst = {}

    def check(self, group, what, ours, ref, tol, verbose, l2=False):
        err, i, (a, b) = rel_err(ours, ref)
        if l2:
            err, what = l2_err(ours, ref), what + " [L2]"
        self.worst[group] = max(self.worst.get(group, 0.0), err)
        ok = tol is None or err < tol
        if verbose or not ok:
            print(f"  {'ok ' if ok else 'BAD'} {what:55s} rel {err:.2e} (worst [{i}]: ours {a:.7g} torch {b:.7g})")
        if not ok:
            self.failures.append(f"{what}: rel {err:.2e} >= {tol:g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device for torch")
        return 77
    # TF32 off for convolutions and matrix products: the legacy flags and, where this torch
    # has it, the fp32_precision API that supersedes them (the two must not disagree).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    for mod in ("torch.backends.cudnn.conv", "torch.backends.cudnn.rnn", "torch.backends.cuda.matmul", "torch.backends.cudnn"):
        obj = eval(mod)  # noqa: S307 (fixed strings)
        if hasattr(obj, "fp32_precision"):
            try:
                obj.fp32_precision = "ieee"
            except Exception as e:  # noqa: BLE001
                print(f"  note: cannot set {mod}.fp32_precision: {e}")
    torch.backends.cudnn.deterministic = True
    dev = torch.device("cuda")
    bf16 = a.precision == "bf16"

    l2 = a.depth >= 50
    with tempfile.TemporaryDirectory() as d:
        cmd = [a.driver, "step", "--depth", str(a.depth), "--width", "64", "--classes", str(a.classes),
               "--image-size", str(a.image_size), "--batch", str(a.batch), "--seed", "3",
               "--precision", a.precision, "--out", d]
        if l2:
            torch.manual_seed(a.depth)
            ref_model = getattr(torchvision.models, f"resnet{a.depth}")(num_classes=a.classes)
            with torch.no_grad():
                for name, mod in ref_model.named_modules():
                    if name.endswith(".bn3"):
                        mod.weight.uniform_(*BN3_GAMMA)
            st.save(os.path.join(d, "torch.safetensors"), {k: v.numpy() for k, v in ref_model.state_dict().items()})
            cmd += ["--init", os.path.join(d, "torch.safetensors")]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        init = st.load(os.path.join(d, "init.safetensors"))
        batch = st.load(os.path.join(d, "batch.safetensors"))
        grads = st.load(os.path.join(d, "grads.safetensors"))
        fwd = st.load(os.path.join(d, "fwd.safetensors"))
        after_sgd = st.load(os.path.join(d, "sgd.safetensors"))
        after_adam = st.load(os.path.join(d, "adam.safetensors"))

    x = torch.from_numpy(batch["images"]).permute(0, 3, 1, 2).contiguous().to(dev)
    y = torch.from_numpy(batch["labels"]).to(dev)
    if bf16:
        x = x.contiguous(memory_format=torch.channels_last)

    def fresh():
        m = getattr(torchvision.models, f"resnet{a.depth}")(num_classes=a.classes)
        m.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()}, strict=True)
        m = m.to(dev)
        if bf16:
            m = m.to(memory_format=torch.channels_last)
        m.train()
        return m

    def step(m):
        m.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = m(x)
        loss = torch.nn.functional.cross_entropy(out.float(), y)
        loss.backward()
        return loss

    rep = Report()
    gtol = None if bf16 else (TOL_L2 if l2 else a.tol)
    print(("weights: torchvision, bn3 weights U(0.2, 0.5); gradients and steps in L2 per tensor\n" if l2 else "")
          + f"resnet{a.depth} {a.precision}: image {a.image_size}, batch {a.batch}, classes {a.classes}, "
          f"torch {torch.__version__} on {torch.cuda.get_device_name()}, "
          f"cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}, "
          f"conv fp32_precision={getattr(getattr(torch.backends.cudnn, 'conv', None), 'fp32_precision', 'n/a')}")
    m = fresh()
    loss = step(m)
    rep.check("loss", "loss", grads["loss"], loss.detach().cpu().numpy(), 1e-2 if bf16 else a.tol, True)
    for name, p in m.named_parameters():
        rep.check("grad", f"grad {name}", grads[name], p.grad.float().cpu().numpy(), gtol, a.verbose, l2)
    for name, b in m.state_dict().items():
        if "running" in name:
            rep.check("state", f"after forward: {name}", fwd[name], b.cpu().numpy(), None if bf16 else a.tol, a.verbose)
    torch.optim.SGD(m.parameters(), **SGD).step()
    for name, v in m.state_dict().items():
        if "num_batches" not in name:
            rep.check("state", f"after SGD: {name}", after_sgd[name], v.cpu().numpy(), gtol, a.verbose, l2)
    m = fresh()
    init = {n: v.detach().double().cpu().numpy().copy() for n, v in m.state_dict().items()}
    step(m)
    ref_grads = {n: p.grad.detach().float().cpu().numpy().copy() for n, p in m.named_parameters()}
    torch.optim.Adam(m.parameters(), **ADAM).step()
    flips = total = 0
    for name, v in m.state_dict().items():
        if "num_batches" in name:
            continue
        ours, ref = after_adam[name], v.cpu().numpy()
        if name in ref_grads and l2 and not bf16:
            # As compare_torch.py does for ResNet-50: Adam's first step is ~lr * sign(grad), so
            # where fp32 rounding flips the sign of a small gradient the step flips whole. Count
            # the weights that stepped the other way (< 1 %) and check every |step| <= lr.
            d_ours = ours.astype(np.float64) - init[name]
            d_ref = ref.astype(np.float64) - init[name]
            flips += int(((d_ours * d_ref) < 0).sum())
            total += d_ref.size
            if np.abs(d_ours).max() > ADAM["lr"] * 1.001 + 1e-7:
                rep.failures.append(f"Adam step: {name}: |step| {np.abs(d_ours).max():.3g} > lr")
            continue
        if name in ref_grads:
            g = np.abs(ref_grads[name])
            noisy = g < ADAM_NOISE * g.max()
            ours, ref = np.where(noisy, 0.0, ours), np.where(noisy, 0.0, ref)
        rep.check("adam", f"after Adam: {name}", ours, ref, gtol, a.verbose, l2)
    if total:
        frac = flips / total
        print(f"  Adam: {flips} of {total} weights stepped the other way ({frac:.2e}, tol {TOL_ADAM_FLIPS:g})")
        if frac >= TOL_ADAM_FLIPS:
            rep.failures.append(f"Adam step: {frac:.2e} of the weights stepped the other way")
    print(f"  worst rel err: loss {rep.worst.get('loss', 0):.2e}, gradients {rep.worst.get('grad', 0):.2e}, "
          f"states after forward/SGD {rep.worst.get('state', 0):.2e}, Adam steps {rep.worst.get('adam', 0):.2e}")
    if rep.failures:
        print(f"FAILED: {len(rep.failures)} tensors out of tolerance")
        for f in rep.failures[:20]:
            print("  " + f)
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
