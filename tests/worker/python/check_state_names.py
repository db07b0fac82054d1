"""Our model's state entries (names, shapes, order) must be torchvision's state_dict(), for
every depth, with any width and class count (torchvision itself only has width 64; other widths
are checked by scaling every channel count of the width-64 model by width/64).
Exit code 77 (ctest SKIP_RETURN_CODE) when torchvision is not importable."""
import argparse
import json
import subprocess
import sys

try:
    import torchvision
except ImportError as e:
    print(f"SKIPPED: torchvision not importable ({e})")
    sys.exit(77)


def ours(driver, depth, width, classes):
    out = subprocess.run([driver, "names", "--depth", str(depth), "--width", str(width),
                          "--classes", str(classes)], check=True, capture_output=True, text=True).stdout
    return [(e["name"], e["shape"]) for e in map(json.loads, out.splitlines())]


def theirs(depth, width, classes):
    m = getattr(torchvision.models, f"resnet{depth}")(num_classes=classes)
    res = []
    for name, t in m.state_dict().items():
        shape = list(t.shape)
        if width != 64:
            # Scale channel dimensions (every dim except kernel sizes and the class count).
            if name.startswith("fc.weight"):
                shape = [shape[0], shape[1] * width // 64]
            elif name.startswith("fc."):
                pass
            elif len(shape) == 4:
                shape = [shape[0] * width // 64, 3 if shape[1] == 3 else shape[1] * width // 64] + shape[2:]
            elif shape:
                shape = [shape[0] * width // 64]
        res.append((name, shape))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    a = ap.parse_args()
    bad = 0
    for depth in (18, 34, 50, 101, 152):
        for width, classes in ((64, 1000), (16, 10)):
            o, t = ours(a.driver, depth, width, classes), theirs(depth, width, classes)
            if o != t:
                bad += 1
                print(f"resnet{depth} width {width}: {len(o)} entries vs torchvision's {len(t)}")
                for i, (x, y) in enumerate(zip(o, t)):
                    if x != y:
                        print(f"  first difference at #{i}: ours {x} torchvision {y}")
                        break
            else:
                print(f"resnet{depth} width {width} classes {classes}: {len(o)} entries match")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
