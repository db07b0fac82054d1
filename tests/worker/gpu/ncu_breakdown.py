"""Per-kernel breakdown of one training step from Nsight Compute's CSV
(ncu --csv --metrics gpu__time_duration.sum ...): kernels grouped by what they do, with their
count and device ms, then the kernels with the most time. Usage: ncu_breakdown.py FILE.csv [TOP]"""
import csv
import io
import re
import sys

GROUPS = [  # first match wins
    ("BN/ReLU/residual (ours)", r"stats_kernel|finalize_train|apply_kernel|bwd_reduce|bwd_finalize|bwd_dx|finalize_eval"),
    ("max-pool (ours)", r"maxpool"),
    ("avg-pool, loss, fc helpers (ours)", r"avgpool|softmax|xent|fill_rows|column_sums"),
    ("optimizer, dW accumulate, shadow (ours)", r"sgd_kernel|adam_kernel|add_kernel|cast_kernel|scale_kernel|nonfinite"),
    ("data (ours)", r"images_kernel|labels_kernel"),
    ("cuDNN layout/padding", r"nhwcAddPadding|nchwToNhwc|nhwcToNchw|AddPadding|RemovePadding|transpose|Transpose"),
    ("cuDNN/cuBLAS conv and GEMM", r"."),
]


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    text = open(path, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        print(f"ncu_breakdown: no CSV table in {path}")
        return 1
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    kernels = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        ms = v * {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
                  "second": 1e3, "s": 1e3}.get(unit, 1e-6)
        kernels.append((r["Kernel Name"], ms))
    total = sum(ms for _, ms in kernels)
    print(f"one step: {len(kernels)} kernels, {total:.2f} ms of kernel time (ncu, serialized)")
    groups = {}
    for name, ms in kernels:
        for g, pat in GROUPS:
            if re.search(pat, name):
                c = groups.setdefault(g, [0, 0.0])
                c[0] += 1
                c[1] += ms
                break
    for g, (c, ms) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"  {g:42s} {c:5d} kernels {ms:8.2f} ms {100 * ms / max(total, 1e-9):5.1f} %")
    per = {}
    for name, ms in kernels:
        short = re.sub(r"\(.*", "", name)[:90]
        c = per.setdefault(short, [0, 0.0])
        c[0] += 1
        c[1] += ms
    print(f"top {top} kernels:")
    for name, (c, ms) in sorted(per.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {ms:8.3f} ms {c:4d}x  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
