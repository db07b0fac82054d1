#!/usr/bin/python3
"""Plots train_resnet --metrics-file records (JSON lines) as one PNG: training loss, validation
loss, validation top-1, validation top-5, learning rate and images/s, one line per file, against
the optimizer step, the epoch or the time (so that runs at different speeds compare by time).

  scripts/plot_metrics.py run1.jsonl [run2.jsonl ...] -o metrics.png [--x step|epoch|time] [--title TEXT]

Records: step records ({"step", "epoch", "batch", "loss", "lr", "images_per_s", "time", ...}),
validation records ({"eval": true, "step", "epoch", "top1", "top5", "val_loss", "time"},
accuracies in percent), a resume record ({"resume": true, "step"}: a resumed run continued the
file, and the records the interrupted run wrote from that step on, after its last checkpoint, are
left out) and one final record ({"final": true, ...}, ignored here). Needs matplotlib (Debian:
python3-matplotlib).
"""
import argparse
import json
import os
import sys


def load(path):
    steps, evals = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                raise SystemExit(f"plot_metrics: {path}:{n}: not JSON ({e})")
            if r.get("final"):
                continue
            if r.get("resume"):  # what the interrupted run logged after its checkpoint is redone
                at = r.get("step", 0)
                steps = [s for s in steps if s.get("step", 0) < at]
                evals = [e for e in evals if e.get("step", 0) <= at]
                continue
            (evals if r.get("eval") else steps).append(r)
    return steps, evals


def x_of(steps, axis):
    """The x value of a record for --x: the step, the time (s), or the epoch (fractional for step
    records: epoch + batch / steps per epoch; a validation record comes at the end of its epoch)."""
    if axis == "time":
        return lambda r: r.get("time", 0.0)
    if axis == "step":
        return lambda r: r["step"]
    per_epoch = next(((r["step"] - r["batch"]) / r["epoch"] for r in steps if r.get("epoch", 0) > 0 and "batch" in r),
                     max([r.get("batch", 0) for r in steps] + [0]) + 1)
    return lambda r: r["epoch"] + 1 if r.get("eval") else r["epoch"] + r.get("batch", 0) / per_epoch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="--metrics-file JSONL files")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--x", default="step", choices=["step", "epoch", "time"],
                    help="the horizontal axis: the optimizer step (default), the epoch, or the time in seconds")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit(f"plot_metrics: matplotlib is missing ({e}); apt-get install python3-matplotlib")

    runs = []
    for path in a.files:
        try:
            runs.append((os.path.splitext(os.path.basename(path))[0], *load(path)))
        except OSError as e:
            raise SystemExit(f"plot_metrics: cannot read {path}: {e.strerror}")
    if not any(steps or evals for _, steps, evals in runs):
        raise SystemExit("plot_metrics: no step or validation records in " + ", ".join(a.files))

    fig, ax = plt.subplots(3, 2, figsize=(11, 10.5), constrained_layout=True)
    (loss_ax, val_loss_ax), (top1_ax, top5_ax), (lr_ax, ips_ax) = ax
    for name, steps, evals in runs:
        x = x_of(steps, a.x)

        def series(records, key):
            pts = [(x(r), r[key]) for r in records if r.get(key) is not None]
            return list(zip(*pts)) if pts else None

        for panel, records, key, style in ((loss_ax, steps, "loss", "-"), (val_loss_ax, evals, "val_loss", "o-"),
                                           (top1_ax, evals, "top1", "o-"), (top5_ax, evals, "top5", "s-"),
                                           (lr_ax, steps, "lr", "-"), (ips_ax, steps, "images_per_s", "-")):
            pts = series(records, key)
            if pts:
                panel.plot(*pts, style, label=name)
    xlabel = {"step": "step", "epoch": "epoch", "time": "time (s)"}[a.x]
    for a_, title, ylabel in ((loss_ax, "training loss", "loss"), (val_loss_ax, "validation loss", "loss"),
                              (top1_ax, "validation top-1", "%"), (top5_ax, "validation top-5", "%"),
                              (lr_ax, "learning rate", "lr"), (ips_ax, "throughput", "images/s")):
        a_.set_title(title)
        a_.set_xlabel(xlabel)
        a_.set_ylabel(ylabel)
        a_.grid(alpha=0.3)
        if a_.lines:
            a_.legend(fontsize="small")
    if a.title:
        fig.suptitle(a.title)
    out_dir = os.path.dirname(os.path.abspath(a.output))
    if not os.path.isdir(out_dir):
        raise SystemExit(f"plot_metrics: the folder of {a.output} does not exist")
    tmp = a.output + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, a.output)  # nothing half-written under the final name
    print(f"plot_metrics: wrote {a.output} ({len(runs)} run(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
