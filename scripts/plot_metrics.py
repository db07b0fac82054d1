#!/usr/bin/python3
"""Plots train_resnet --metrics-file records (JSON lines) as one PNG: training loss, validation
top-1/top-5, learning rate and images/s against the optimizer step, one line per file.

  scripts/plot_metrics.py run1.jsonl [run2.jsonl ...] -o metrics.png [--title TEXT]

Records: step records ({"step", "loss", "lr", "images_per_s", ...}), validation records
({"eval": true, "step", "top1", "top5", "val_loss"}, accuracies in percent) and one final record
({"final": true, ...}, ignored here). Needs matplotlib (Debian: python3-matplotlib).
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
            (evals if r.get("eval") else steps).append(r)
    return steps, evals


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="--metrics-file JSONL files")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--title", default="", help="figure title")
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

    fig, ax = plt.subplots(2, 2, figsize=(11, 7.5), constrained_layout=True)
    (loss_ax, acc_ax), (lr_ax, ips_ax) = ax
    for name, steps, evals in runs:
        loss_ax.plot([r["step"] for r in steps], [r["loss"] for r in steps], label=name)
        if evals:
            line, = acc_ax.plot([r["step"] for r in evals], [r["top1"] for r in evals], "o-", label=f"{name} top-1")
            acc_ax.plot([r["step"] for r in evals], [r["top5"] for r in evals], "s--", color=line.get_color(),
                        alpha=0.6, label=f"{name} top-5")
        lr = [(r["step"], r["lr"]) for r in steps if "lr" in r]
        if lr:
            lr_ax.plot(*zip(*lr), label=name)
        ips = [(r["step"], r["images_per_s"]) for r in steps if r.get("images_per_s")]
        if ips:
            ips_ax.plot(*zip(*ips), label=name)
    for a_, title, ylabel in ((loss_ax, "training loss", "loss"), (acc_ax, "validation accuracy", "%"),
                              (lr_ax, "learning rate", "lr"), (ips_ax, "throughput", "images/s")):
        a_.set_title(title)
        a_.set_xlabel("step")
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
