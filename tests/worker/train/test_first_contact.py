#!/usr/bin/python3
"""What a new user meets first (issue 25), through the real train_resnet on small PNG folders.

Usage: test_first_contact.py CASE --train PATH --launch PATH
Cases:
  val_folders   train/ + test/ validates on test/ (named in the log); validation/ wins over test/;
                --val-data DIR names another folder; none found is a line, and --eval-only's error
                says what would give it one
  image_size    without --image-size the size is the images' (measured from their headers, said in
                the log); an --image-size far above them is a warning that says what to use
  eval_only     --eval-only takes depth, width, stem, classes, image size and label smoothing from
                the checkpoint: the same loss and top-1 as the training run's last validation of the
                same weights; it prints no training data, recipe or optimizer; a contradicting
                --depth is refused
  metrics_resume  --metrics-file continues on --resume: the first run's records stay, a record
                marks the resume, time goes on
Exit 0 pass, 1 fail, 77 skipped (no Pillow).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_train_resnet import SKIP, check, main, ok, run  # noqa: E402

TINY = ["--depth", "18", "--width", "8", "--batch-size", "8", "--epochs", "1", "--threads", "1", "--log-every", "1"]


def image_folder(root, splits, size=24, per_class=8):
    """root/<split>/<class>/<n>.png, 2 classes of (size x size) images: dark and bright."""
    from PIL import Image
    for split in splits:
        for c, level in (("dark", 40), ("bright", 210)):
            os.makedirs(os.path.join(root, split, c), exist_ok=True)
            for n in range(per_class):
                Image.new("RGB", (size, size), (level + n, level, level - n)).save(os.path.join(root, split, c, f"{n}.png"))
    return root


def have_pil():
    try:
        import PIL  # noqa: F401
        return True
    except ImportError:
        print("SKIPPED: no Pillow (python3-pil) to write the images")
        return False


def case_val_folders(a, tmp):
    if not have_pil():
        return SKIP
    d = image_folder(os.path.join(tmp, "a"), ["train", "test"])
    out = ok([a.train, "--data", d] + TINY).stdout
    check(re.search(r"^Validation: ImageFolder .*/a/test: 16 images, 2 classes", out, re.M), f"test/ not used:\n{out}")
    check(re.search(r"^Validation: epoch 0, step \d+: top-1", out, re.M), f"no validation pass:\n{out}")
    d = image_folder(os.path.join(tmp, "b"), ["train", "validation", "test"])
    out = ok([a.train, "--data", d] + TINY).stdout
    check(re.search(r"^Validation: ImageFolder .*/b/validation:", out, re.M), f"validation/ not preferred:\n{out}")
    other = image_folder(os.path.join(tmp, "other"), ["held_out"], per_class=3)
    out = ok([a.train, "--data", d, "--val-data", os.path.join(other, "held_out")] + TINY).stdout
    check(re.search(r"^Validation: ImageFolder .*/other/held_out: 6 images", out, re.M), f"--val-data DIR not used:\n{out}")
    d = image_folder(os.path.join(tmp, "c"), ["train"])
    out = ok([a.train, "--data", d] + TINY).stdout
    check(re.search(r"^Validation: none \(.*/c has no val/, validation/, test/ folder; --val-data DIR names one\)$", out, re.M),
          f"no line about the missing validation:\n{out}")
    p = run([a.train, "--data", d, "--eval-only", "--init", os.path.join(tmp, "x.safetensors")] + TINY)
    # (the architecture comes from --init first: a missing file is its own error)
    check(p.returncode != 0, "--eval-only without validation data ran")
    print("val/ folders: test/ used and named, validation/ before test/, --val-data DIR, a line when none")


def case_image_size(a, tmp):
    if not have_pil():
        return SKIP
    d = image_folder(os.path.join(tmp, "d"), ["train"], size=24)
    p = ok([a.train, "--data", d] + TINY)
    m = re.search(r"^Image size: 24 \(median short side 24 px \(24-24 over 16 sampled training images\)", p.stdout, re.M)
    check(m, f"no 'Image size: 24' line:\n{p.stdout}")
    check(re.search(r"^train_resnet: ResNet-18 \(width 8, 2 classes, 24x24,", p.stdout, re.M), f"not trained at 24:\n{p.stdout}")
    check("warning" not in p.stderr, f"a warning at the images' own size: {p.stderr}")
    p = ok([a.train, "--data", d, "--image-size", "224", "--max-steps", "1"] + TINY)
    w = [l for l in p.stderr.splitlines() if l.startswith("train_resnet: warning: --image-size 224 is 9.3x")]
    check(w and "use --image-size 24 (or --recipe small-images)" in w[0], f"no warning for 224 px on 24 px images:\n{p.stderr}")
    check("Image size:" not in p.stdout, "the given size was replaced")
    print(f"image size: 24 measured and used; at 224: '{w[0][:90]}...'")


def last_validation(out):
    v = re.findall(r"^Validation: epoch \d+, step \d+: top-1 ([\d.]+) %, top-5 [\d.]+ %, loss ([\d.]+)", out, re.M)
    check(v, f"no validation line:\n{out}")
    return v[-1]


def case_eval_only(a, tmp):
    if not have_pil():
        return SKIP
    d = image_folder(os.path.join(tmp, "e"), ["train", "val"], size=20)
    ck = os.path.join(tmp, "ck.safetensors")
    train = ok([a.train, "--data", d, "--recipe", "small-images", "--width", "8", "--batch-size", "8", "--epochs", "2",
                "--threads", "1", "--save", ck]).stdout
    top1, loss = last_validation(train)
    ev = ok([a.train, "--data", d, "--eval-only", "--init", ck, "--threads", "1"]).stdout
    check(re.search(r"^Architecture from .*ck.safetensors: ResNet-18, width 8, cifar stem, 2 classes, 32x32, CenterCrop; "
                    r"loss with label smoothing 0.1 \(the training run's\)$", ev, re.M), f"no architecture line:\n{ev}")
    m = re.search(r"^Evaluated .*: top-1 ([\d.]+) %, top-5 [\d.]+ %, loss ([\d.]+) \(16 images, .* label smoothing 0.1", ev, re.M)
    check(m, f"no 'Evaluated' line:\n{ev}")
    check((m.group(1), m.group(2)) == (top1, loss), f"--eval-only: top-1 {m.group(1)}, loss {m.group(2)}; the training run's "
          f"last validation of the same weights: top-1 {top1}, loss {loss}")
    for absent in ("Recipe:", "Data:", "sgd", "steps per epoch", "RandomCrop"):
        check(absent not in ev, f"--eval-only prints '{absent}', which does not apply:\n{ev}")
    p = run([a.train, "--data", d, "--eval-only", "--init", ck, "--depth", "50"])
    check(p.returncode == 2 and "--depth differs from the checkpoint" in p.stderr and "ResNet-18" in p.stderr,
          f"a contradicting --depth: exit {p.returncode}, {p.stderr}")
    print(f"--eval-only from the checkpoint's metadata: top-1 {top1} %, loss {loss}, as the training run's validation")


def case_metrics_resume(a, tmp):
    ck, mf = os.path.join(tmp, "m.safetensors"), os.path.join(tmp, "m.jsonl")
    base = [a.train, "--depth", "18", "--width", "8", "--image-size", "16", "--num-classes", "4", "--data", "learnable",
            "--num-samples", "64", "--batch-size", "8", "--epochs", "3", "--log-every", "1", "--threads", "1",
            "--val-samples", "16", "--save", ck, "--metrics-file", mf]
    ok(base + ["--max-steps", "10"])  # the "interrupted" run
    with open(mf) as f:
        first = [json.loads(l) for l in f]
    ok(base + ["--resume", ck])
    with open(mf) as f:
        records = [json.loads(l) for l in f]
    check(records[:len(first)] == first, "the first run's records were not kept")
    mark = records[len(first)]
    check(mark.get("resume") is True and mark["step"] == 10 and mark["from"] == ck, f"no resume record: {mark}")
    last_time = [r["time"] for r in first if "time" in r and "step" in r and r["step"] <= 10][-1]
    check(mark["time"] == last_time, f"the resume record's time {mark['time']} is not the last one before it, {last_time}")
    after = [r for r in records[len(first) + 1:] if "time" in r]
    check(after and all(r["time"] >= last_time for r in after), "time restarted after the resume")
    steps = [r["step"] for r in records[len(first) + 1:] if "loss" in r]
    check(steps and steps[0] == 10 and steps[-1] == 23, f"the resumed run's steps {steps}")
    check(records[-1].get("final") is True, "no final record")
    print(f"--metrics-file on --resume: {len(first)} records kept, resume marked at step 10 (time {last_time:.2f} s), "
          f"{len(records) - len(first) - 1} appended")


if __name__ == "__main__":
    sys.exit(main(globals()))
