#!/usr/bin/python3
"""What train_resnet reports (issue 12): learning-rate schedules against torch's schedulers,
validation summed over ranks, --eval-only on a torchvision-exported checkpoint against
torchvision's own evaluation, --save-best, TensorBoard files read back with the tensorboard
package, and scripts/plot_metrics.py.

Usage: test_train_metrics.py CASE --train PATH --launch PATH [--tools-python PATH] [--plot PATH]
Cases: schedule, validation, torchvision, best, tensorboard, plot. Exit 0 pass, 1 fail, 77 skipped.
"""
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_train_resnet import SKIP, SMALL, Failure, check, clean_env, launch_run, main, ok, read_st, write_st  # noqa: E402


def records(path):
    with open(path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    steps = [r for r in rows if not r.get("final") and not r.get("eval")]
    evals = [r for r in rows if r.get("eval")]
    return steps, evals


# --- the synthetic data set of worker/core/synthetic.h, in numpy (float32 as the C++ code)

def _mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return z ^ (z >> np.uint64(31))


def _hash4(seed, sample, element, stream):
    with np.errstate(over="ignore"):
        h = _mix64(np.asarray((seed + 0x9e3779b97f4a7c15 * (stream + 1)) % 2**64, dtype=np.uint64))
        h = _mix64(h ^ (np.asarray(sample, dtype=np.uint64) + np.uint64(0x632be59bd9b4e019)))
        return _mix64(h ^ (np.asarray(element, dtype=np.uint64) + np.uint64(0x85ebca77c2b2ae63)))


def _uniform01(h):
    return ((h >> np.uint64(40)).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / 16777216.0)


def _normalish(h):
    s = sum(((h >> np.uint64(k)) & np.uint64(0xFFFF)).astype(np.int64) for k in (0, 16, 32, 48))
    return (s - 131070).astype(np.float32) * np.float32(np.float32(1.7320508) / np.float32(65536.0))


def synthetic_label(seed, sample, classes):
    return int(_hash4(seed, sample, 0, 2) % np.uint64(classes))


def synthetic_learnable(seed, sample, size, classes):
    """One image (H, W, 3) of DataKind::Learnable and its label."""
    cls = synthetic_label(seed, sample, classes)
    e = np.arange(size * size * 3, dtype=np.int64)
    c, pix = e % 3, e // 3
    y, x = pix // size, pix % size
    mean = np.float32(2.0) * _uniform01(_hash4(seed, cls, c, 3)) - np.float32(1.0)
    h = int(_hash4(seed, cls, 1000, 3))
    period, fx, fy, phase = 2 + h % 8, 1 + (h >> 8) % 3, (h >> 16) % 3, (h >> 24) % 16
    stripe = np.where(((x * fx + y * fy + phase) // period) & 1, np.float32(1.0), np.float32(-1.0)).astype(np.float32)
    noise = _normalish(_hash4(seed, sample, e, 1))
    img = (mean + np.float32(0.5) * stripe) + np.float32(0.5) * noise
    return img.astype(np.float32).reshape(size, size, 3), cls


# --- cases

def case_schedule(a, tmp):
    """The lr of every step (metrics file) against torch.optim.lr_scheduler stepped per step."""
    import torch
    spe = 128 // 8  # SMALL: 128 samples, batch 8, one rank
    epochs, warm = 3, 10
    total = epochs * spe

    def torch_lrs(make_after, base):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
        warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warm, end_factor=1.0, total_iters=warm - 1)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [warmup, make_after(opt)], milestones=[warm])
        out = []
        for _ in range(total):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return out

    # --lr 0.05 per 4 images, global batch 8: the rate used is 0.1 (linear scaling rule).
    common = SMALL + ["--optimizer", "sgd", "--lr", "0.05", "--lr-base-batch", "4", "--epochs", str(epochs),
                      "--log-every", "1", "--warmup-epochs", str(warm / spe)]
    variants = {
        "cosine": (["--lr-schedule", "cosine"],
                   lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warm)),
        "step": (["--lr-schedule", "step", "--lr-steps", "1,2", "--lr-gamma", "0.5"],
                 lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[spe - warm, 2 * spe - warm],
                                                                 gamma=0.5)),
    }
    for name, (args, after) in variants.items():
        m = f"{tmp}/{name}.jsonl"
        p = ok([a.train] + common + args + ["--metrics-file", m])
        check("lr 0.1 (--lr 0.05 per 4 images x 8 / 4)" in p.stdout, f"no effective lr at start:\n{p.stdout[:2000]}")
        lines = [l for l in p.stdout.splitlines() if l.startswith("Epoch[")]
        check(len(lines) == total and all(", lr: " in l for l in lines), f"{name}: not every log line shows the lr")
        ours = {r["step"]: r["lr"] for r in records(m)[0]}
        ref = torch_lrs(after, 0.1)
        check(sorted(ours) == list(range(total)), f"{name}: steps logged {sorted(ours)[:5]}...")
        worst = max(abs(ours[s] - ref[s]) / ref[s] for s in range(total))
        check(worst < 1e-9, f"{name}: lr differs from torch's by {worst:.2e} (relative)")
        print(f"{name} with {warm} warm-up steps: {total} steps, lr within {worst:.1e} of torch's schedulers")


def case_validation(a, tmp):
    """Every validation image counts once, whatever the number of ranks (101 images, batch 8)."""
    if not os.access(a.launch, os.X_OK):
        print(f"skipped: {a.launch} is not built")
        return SKIP
    ck = f"{tmp}/w.safetensors"
    ok([a.train] + SMALL + ["--max-steps", "20", "--save", ck])
    results = {}
    for n in (1, 2, 3):
        m = f"{tmp}/e{n}.jsonl"
        args = SMALL + ["--eval-only", "--init", ck, "--val-samples", "101", "--metrics-file", m]
        if n == 1:
            ok([a.train] + args)
        else:
            launch_run(a, tmp, n, args, f"e{n}")
        ev = records(m)[1]
        check(len(ev) == 1 and ev[0]["val_images"] == 101, f"{n} ranks: eval records {ev}")
        results[n] = ev[0]
    for n in (2, 3):
        for k in ("top1", "top5"):
            check(results[n][k] == results[1][k], f"{n} ranks: {k} {results[n][k]} != {results[1][k]} on 1 rank")
        check(abs(results[n]["val_loss"] - results[1]["val_loss"]) <= 1e-6 * results[1]["val_loss"],
              f"{n} ranks: val_loss {results[n]['val_loss']} vs {results[1]['val_loss']}")
    print(f"--eval-only on 1, 2, 3 ranks: 101 images each, top-1 {results[1]['top1']:.2f} %, "
          f"top-5 {results[1]['top5']:.2f} %, loss {results[1]['val_loss']:.5f}")

    # During training: every epoch and not again at the end (it coincides), on 2 ranks.
    m = f"{tmp}/t.jsonl"
    _, text = launch_run(a, tmp, 2, SMALL + ["--epochs", "2", "--val-samples", "101", "--metrics-file", m,
                                              "--log-every", "4"], "t")
    ev = records(m)[1]
    check([r["epoch"] for r in ev] == [0, 1] and all(r["val_images"] == 101 for r in ev), f"eval records {ev}")
    check(re.search(r"Validation: epoch 1, step 16: top-1 [0-9.]+ %, top-5 [0-9.]+ %, loss [0-9.]+ \(101 images", text),
          "no validation line")
    check(re.search(r"Summary: 16 steps in [0-9:]+, [0-9.]+ images/s; validation top-1 best [0-9.]+ % \(epoch \d\), last",
                    text), f"no summary line:\n{text[-1500:]}")
    # --eval-every 2 over 3 epochs: after epoch 1, then at the end (epoch 2).
    m = f"{tmp}/t3.jsonl"
    ok([a.train] + SMALL + ["--epochs", "3", "--val-samples", "30", "--eval-every", "2", "--metrics-file", m])
    check([r["epoch"] for r in records(m)[1]] == [1, 2], f"--eval-every 2: {records(m)[1]}")
    # --max-steps mid-epoch: one evaluation at the end.
    ok([a.train] + SMALL + ["--max-steps", "5", "--val-samples", "30", "--metrics-file", m])
    ev = records(m)[1]
    check(len(ev) == 1 and ev[0]["step"] == 5 and ev[0]["epoch"] == 0, f"--max-steps 5: {ev}")


def case_torchvision(a, tmp):
    """--eval-only on weights exported by torchvision agrees with torchvision's own evaluation
    of the same images (regenerated here from worker/core/synthetic.h's definition)."""
    try:
        import torch
        import torchvision
    except ImportError:
        print("skipped: /usr/bin/python3 has no torch/torchvision")
        return SKIP
    seed, size, classes = 3, 32, 10
    # The regenerated images are bit-identical to the trainer's (its --dump-batch).
    dump = f"{tmp}/batch.safetensors"
    ok([a.train] + SMALL + ["--seed", str(seed), "--max-steps", "1", "--dump-batch", dump])
    t, _ = read_st(dump)
    for i, idx in enumerate(t["indices"]):
        img, lab = synthetic_learnable(seed, int(idx), size, classes)
        check(np.array_equal(img, t["images"][i]) and lab == t["labels"][i], f"generator differs at sample {idx}")

    ours = f"{tmp}/ours.safetensors"
    ok([a.train] + SMALL + ["--seed", str(seed), "--max-steps", "30", "--save", ours])
    w, _ = read_st(ours)
    model = torchvision_resnet18_width(torchvision, classes, 8)  # SMALL's --width 8
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in w.items()}, strict=True)
    exported = f"{tmp}/exported.safetensors"
    write_st(exported, {k: v.detach().numpy() for k, v in model.state_dict().items()})

    nval = 80
    m = f"{tmp}/e.jsonl"
    p = ok([a.train] + SMALL + ["--seed", str(seed), "--eval-only", "--init", exported, "--val-samples", str(nval),
                                "--metrics-file", m])
    check(f"Evaluated {exported}: top-1" in p.stdout, f"no result line:\n{p.stdout}")
    got = records(m)[1][0]

    first = 128  # the validation samples follow the 128 training samples
    imgs, labels = zip(*(synthetic_learnable(seed, first + i, size, classes) for i in range(nval)))
    x = torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).contiguous()
    y = torch.tensor(labels)
    model.eval()
    with torch.no_grad():
        z = model(x).double()
    loss = torch.nn.functional.cross_entropy(z, y).item()
    zl = z.gather(1, y[:, None])
    larger = (z > zl).sum(1)
    # An image whose rank could flip under fp32 rounding (a logit within 1e-4 of its label's)
    # may count either way; every other one must count as torch counts it.
    close = ((z - zl).abs() < 1e-4 * z.abs().max()).sum(1) > 1
    for k, key in ((1, "top1"), (5, "top5")):
        ref = int((larger < k).sum())
        ours_n = round(got[key] * nval / 100)
        check(abs(ours_n - ref) <= int(close.sum()), f"{key}: ours {ours_n}/{nval}, torchvision {ref}/{nval}")
    check(abs(got["val_loss"] - loss) <= 1e-4 * loss, f"val_loss ours {got['val_loss']}, torchvision {loss}")
    print(f"--eval-only of a torchvision export: top-1 {got['top1']:.2f} %, top-5 {got['top5']:.2f} %, "
          f"loss {got['val_loss']:.6f} (torchvision {loss:.6f}; {int(close.sum())} near-tied images)")


def torchvision_resnet18_width(torchvision, classes, width):
    """torchvision's ResNet-18 with base width `width` (its own blocks, only narrower)."""
    import torch.nn as nn
    m = torchvision.models.resnet18(num_classes=classes)
    m.inplanes = width
    m.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
    m.bn1 = nn.BatchNorm2d(width)
    m.layer1 = m._make_layer(torchvision.models.resnet.BasicBlock, width, 2)
    m.layer2 = m._make_layer(torchvision.models.resnet.BasicBlock, 2 * width, 2, stride=2)
    m.layer3 = m._make_layer(torchvision.models.resnet.BasicBlock, 4 * width, 2, stride=2)
    m.layer4 = m._make_layer(torchvision.models.resnet.BasicBlock, 8 * width, 2, stride=2)
    m.fc = nn.Linear(8 * width, classes)
    return m


def case_best(a, tmp):
    ck = f"{tmp}/ck.safetensors"
    m = f"{tmp}/m.jsonl"
    args = SMALL + ["--epochs", "3", "--val-samples", "40", "--save", ck, "--save-best", "--metrics-file", m,
                    "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--lr-schedule", "cosine"]
    p = ok([a.train] + args)
    best = f"{tmp}/ck.best.safetensors"
    ev = records(m)[1]
    top = max(r["top1"] for r in ev)
    _, meta = read_st(best)
    check(abs(float(meta["top1"]) - top) < 1e-3, f"best file top-1 {meta.get('top1')} vs records {[r['top1'] for r in ev]}")
    best_step = next(r["step"] for r in ev if r["top1"] == top)
    check(meta["step"] == str(best_step), f"best file of step {meta['step']}, best record at step {best_step}")
    check(f"best {best}" in p.stdout, "the summary does not name the best checkpoint")
    # A resumed run keeps the best it had: a worse evaluation does not overwrite it.
    before = open(best, "rb").read()
    ok([a.train] + args[:-2] + ["--epochs", "4", "--resume", ck, "--lr", "1e-9", "--metrics-file", m])
    ev2 = records(m)[1]
    if all(r["top1"] <= top for r in ev2):
        check(open(best, "rb").read() == before, "a worse validation after resuming replaced the best weights")
    print(f"--save-best: {best} holds step {best_step} (top-1 {top:.2f} %)")
    check_epoch_end_checkpoint(a, tmp)


def check_epoch_end_checkpoint(a, tmp):
    """A checkpoint written at an epoch's last step (--save-every one epoch) holds that epoch's
    validation: a run resumed from it after a crash must know the best top-1 so far, or a worse
    epoch would overwrite the best weights."""
    ck = f"{tmp}/epoch.safetensors"
    steps = 128 // 8  # SMALL: --num-samples 128, --batch-size 8
    args = SMALL + ["--epochs", "3", "--val-samples", "40", "--save", ck, "--save-best", "--save-every", str(steps),
                    "--log-every", "1", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]
    p = subprocess.Popen([a.train] + args, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in p.stdout:  # the first step of epoch 1 is logged after the save of step `steps`
            lines.append(line)
            if line.startswith("Epoch[1], Batch[1]"):
                break
    finally:
        p.kill()
        p.wait(timeout=30)
    text = "".join(lines)
    m = re.search(rf"Validation: epoch 0, step {steps}: top-1 ([0-9.]+) %", text)
    check(m is not None, f"no validation of epoch 0 before epoch 1's second step:\n{text[-2000:]}")
    _, meta = read_st(ck.replace(".safetensors", ".train.safetensors"))
    check(meta["step"] == str(steps), f"the checkpoint is of step {meta['step']}, not {steps}")
    check(abs(float(meta["best_top1"]) - float(m.group(1))) < 1e-3,
          f"the checkpoint of step {steps} holds best_top1 {meta['best_top1']}, not epoch 0's {m.group(1)} %: "
          "it was written before that epoch's validation")
    print(f"the checkpoint of an epoch's last step holds its validation (best_top1 {meta['best_top1']})")


TB_READER = r'''
import json, sys
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
path = sys.argv[1]
# Every record, CRCs checked by TensorBoard's reader (DataLossError on a mismatch).
reader = pywrap_tensorflow.PyRecordReader_New(path)
n = 0
while True:
    try:
        reader.GetNext()
    except Exception as e:
        if type(e).__name__ == "OutOfRangeError":
            break
        raise
    n += 1
ea = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
ea.Reload()
out = {"records": n, "scalars": {t: [[s.step, s.value] for s in ea.Scalars(t)] for t in ea.Tags()["scalars"]}}
print(json.dumps(out))
'''


def case_tensorboard(a, tmp):
    if not a.tools_python or not os.access(a.tools_python, os.X_OK):
        if os.environ.get("SETUP_SKIP_PIP") == "1":
            print(f"skipped: no {a.tools_python} (SETUP_SKIP_PIP=1: scripts/setup.sh installed no PyPI tools)")
            return SKIP
        raise Failure(f"{a.tools_python} is missing: scripts/setup.sh installs tensorboard into .venv/tools")
    tb, m = f"{tmp}/tb", f"{tmp}/m.jsonl"
    p = ok([a.train] + SMALL + ["--epochs", "2", "--log-every", "3", "--val-samples", "30", "--tensorboard", tb,
                                "--metrics-file", m])
    files = os.listdir(tb)
    check(len(files) == 1 and files[0].startswith("events.out.tfevents."), f"event files: {files}")
    path = os.path.join(tb, files[0])
    check(f"TensorBoard {path}" in p.stdout, "the summary does not name the event file")
    r = subprocess.run([a.tools_python, "-c", TB_READER, path], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"tensorboard's reader failed: {r.stderr[-2000:]}")
    got = json.loads(r.stdout)
    steps, evals = records(m)
    want = {"train/loss": [(s["step"], s["loss"]) for s in steps], "train/lr": [(s["step"], s["lr"]) for s in steps],
            "train/data_wait_ms": [(s["step"], s["data_wait_ms"]) for s in steps],
            "train/images_per_s": [(s["step"], s["images_per_s"]) for s in steps if s["images_per_s"]],
            "val/top1": [(e["step"], e["top1"]) for e in evals], "val/top5": [(e["step"], e["top5"]) for e in evals],
            "val/loss": [(e["step"], e["val_loss"]) for e in evals]}
    check(sorted(got["scalars"]) == sorted(want), f"tags {sorted(got['scalars'])}")
    for tag, series in want.items():
        back = got["scalars"][tag]
        check([s for s, _ in back] == [s for s, _ in series], f"{tag}: steps {back} vs {series}")
        for (_, v), (_, w) in zip(back, series):
            check(v == float(np.float32(w)), f"{tag}: {v} read back, {w} written (as float32 {np.float32(w)})")
    # One record per log line and evaluation, plus the file_version record.
    check(got["records"] == 1 + len(steps) + len(evals), f"{got['records']} records")
    corrupt = f"{tmp}/corrupt"
    os.mkdir(corrupt)
    raw = bytearray(open(path, "rb").read())
    raw[len(raw) // 2] ^= 0xFF
    open(os.path.join(corrupt, files[0]), "wb").write(bytes(raw))
    r = subprocess.run([a.tools_python, "-c", TB_READER, os.path.join(corrupt, files[0])], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode != 0 and "crc" in r.stderr.lower(), "a flipped byte passed TensorBoard's CRC check")
    print(f"TensorBoard read back {got['records']} records, tags {sorted(got['scalars'])}; a flipped byte fails its CRC")


def case_plot(a, tmp):
    m = f"{tmp}/run.jsonl"
    ok([a.train] + SMALL + ["--epochs", "2", "--log-every", "2", "--val-samples", "30", "--metrics-file", m])
    png = f"{tmp}/m.png"
    r = subprocess.run(["/usr/bin/python3", a.plot, m, m, "-o", png, "--title", "test"], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 0, f"plot_metrics failed: {r.stderr[-2000:]}")
    with open(png, "rb") as f:
        head = f.read(24)
    check(head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")
    w, h = struct.unpack(">II", head[16:24])
    check(w >= 800 and h >= 600, f"PNG is {w}x{h}")
    bad = f"{tmp}/bad.jsonl"
    open(bad, "w").write("{\"step\": 1}\nnot json\n")
    r = subprocess.run(["/usr/bin/python3", a.plot, bad, "-o", f"{tmp}/bad.png"], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode != 0 and "bad.jsonl:2" in r.stderr and not os.path.exists(f"{tmp}/bad.png"),
          f"a bad file: rc {r.returncode}, {r.stderr!r}")
    for axis in ("epoch", "time"):  # issue 25: runs at different speeds compare by time
        r = subprocess.run(["/usr/bin/python3", a.plot, m, "-o", f"{tmp}/{axis}.png", "--x", axis], capture_output=True,
                           text=True, timeout=120)
        check(r.returncode == 0 and os.path.getsize(f"{tmp}/{axis}.png") > 1000, f"--x {axis}: {r.stderr[-2000:]}")
    # A resumed run's file: what the interrupted run logged after its checkpoint (step 5) is left out;
    # epochs are fractional (steps per epoch from step - batch), a validation sits at its epoch's end.
    import importlib.util
    spec = importlib.util.spec_from_file_location("plot_metrics", a.plot)
    pm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pm)
    resumed = f"{tmp}/resumed.jsonl"
    with open(resumed, "w") as f:
        for r in ({"step": 0, "epoch": 0, "batch": 0, "loss": 2.0, "time": 0.1}, {"step": 4, "epoch": 1, "batch": 0, "loss": 1.5, "time": 0.5},
                  {"step": 6, "epoch": 1, "batch": 2, "loss": 1.4, "time": 0.7}, {"eval": True, "step": 8, "epoch": 1, "top1": 50, "top5": 90, "val_loss": 1.2},
                  {"resume": True, "step": 5, "epoch": 1, "batch": 1, "time": 0.6},
                  {"step": 5, "epoch": 1, "batch": 1, "loss": 1.45, "time": 0.62}, {"final": True}):
            f.write(json.dumps(r) + "\n")
    steps, evals = pm.load(resumed)
    check([r["step"] for r in steps] == [0, 4, 5] and evals == [], f"records after a resume: {steps}, {evals}")
    x = pm.x_of(steps, "epoch")
    check([x(r) for r in steps] == [0.0, 1.0, 1.25] and x({"eval": True, "epoch": 1}) == 2, "fractional epochs")
    print(f"plot_metrics wrote a {w}x{h} PNG; --x epoch and --x time; a resumed file's redone records left out")


if __name__ == "__main__":
    sys.exit(main(globals(), ["--tools-python", "--plot"]))
