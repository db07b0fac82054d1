#!/usr/bin/env python3
"""docs/environment.md lists every variable of proto/worker_env.h, in the header's order, and every
knob of worker/core/knobs.h.

Each `inline constexpr const char* kName = "VARIABLE";` of the header must appear, in backticks, in
a row of the page's first table, and the variables' first appearances there must follow the
header's order: the page is the header's reader-facing copy and must not drift from it.

The knobs are the variables read_knobs() reads (worker/core/knobs.cpp: `read_...(env, "WORKER_...",`);
the fields of the Knobs struct (worker/core/knobs.h) name the same ones in their comments. Each
must have a row in the page's knob table (the one under "train_resnet's own knobs"), and every
WORKER_* variable of that table must be a knob. The worker's sources (worker/**) name no WORKER_*
variable in a string that is not a knob, and only worker/core/knobs.cpp calls getenv for one: the
table is the only place a knob is read.

    check_environment_doc.py REPO_ROOT
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
header = open(f"{root}/proto/worker_env.h").read()
names = re.findall(r'inline constexpr const char\* k\w+ = "([A-Za-z_][A-Za-z0-9_]*)";', header)
if len(names) < 40:
    sys.exit(f"found only {len(names)} variables in proto/worker_env.h: has its form changed?")

lines = open(f"{root}/docs/environment.md").read().split("\n")
start = next((i for i, l in enumerate(lines) if l.startswith("| variable")), None)
if start is None:
    sys.exit("docs/environment.md: no table starting with '| variable'")
rows = []
for line in lines[start + 2:]:
    if not line.startswith("|"):
        break
    rows.append(line.split("|")[1])  # the first column: the variables of the row

where = {}
for i, cell in enumerate(rows):
    for v in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cell):
        where.setdefault(v, i)
missing = [n for n in names if n not in where]
if missing:
    sys.exit("docs/environment.md's table lacks " + ", ".join(missing) + " (in proto/worker_env.h)")
order = [where[n] for n in names]
for a, b, na, nb in zip(order, order[1:], names, names[1:]):
    if b < a:
        sys.exit(f"docs/environment.md lists {nb} before {na}; proto/worker_env.h has them the other way round")

# --- The worker's knobs
knobs_cpp = open(f"{root}/worker/core/knobs.cpp").read()
knobs = re.findall(r'read_\w+\(env, "(WORKER_[A-Z0-9_]+)"', knobs_cpp)
if len(knobs) < 10:
    sys.exit(f"found only {len(knobs)} knobs read in worker/core/knobs.cpp: has its form changed?")
knobs_h = open(f"{root}/worker/core/knobs.h").read()
struct = knobs_h[knobs_h.index("struct Knobs {"):]
struct = struct[:struct.index("\n};")]
in_struct = re.findall(r"//.*?\b(WORKER_[A-Z0-9_]+)", struct)
if sorted(in_struct) != sorted(knobs):
    differ = sorted(set(in_struct) ^ set(knobs)) or ["a knob twice"]
    sys.exit("worker/core/knobs.h's struct and read_knobs() in worker/core/knobs.cpp differ: " + ", ".join(differ))
heading = next((i for i, l in enumerate(lines) if l.startswith("## ") and "own knobs" in l), None)
if heading is None:
    sys.exit("docs/environment.md: no section \"train_resnet's own knobs\"")
table = next((i for i in range(heading, len(lines)) if lines[i].startswith("| variable")), None)
if table is None:
    sys.exit("docs/environment.md: no knob table ('| variable | ...') under \"train_resnet's own knobs\"")
documented = set()
for line in lines[table + 2:]:
    if not line.startswith("|"):
        break
    documented.update(re.findall(r"`(WORKER_[A-Z0-9_]+)`", line.split("|")[1]))
missing = [k for k in knobs if k not in documented]
if missing:
    sys.exit("docs/environment.md's knob table lacks " + ", ".join(missing) + " (a knob of worker/core/knobs.h)")
stale = sorted(documented - set(knobs))
if stale:
    sys.exit("docs/environment.md's knob table lists " + ", ".join(stale) + ", which worker/core/knobs.h does not read")

strays = []
for dirpath, _, files in os.walk(f"{root}/worker"):
    for f in files:
        if not f.endswith((".h", ".cpp", ".cu", ".cuh")):
            continue
        path = os.path.join(dirpath, f)
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8", errors="replace").read()
        for literal in re.findall(r'"(?:[^"\\\n]|\\.)*"', text):
            for name in re.findall(r"(?<!-D)WORKER_[A-Z0-9_]+", literal):  # -DWORKER_...: a CMake option
                if name not in knobs:
                    strays.append(f"{rel} names {name}, which is not a knob of worker/core/knobs.h")
        if rel != "worker/core/knobs.cpp" and re.search(r'getenv\(\s*"WORKER_', text):
            strays.append(f"{rel} reads a WORKER_* variable with getenv: read it through worker/core/knobs.h")
if strays:
    sys.exit("\n".join(strays))
print(f"docs/environment.md lists all {len(names)} variables of proto/worker_env.h in its order "
      f"and all {len(knobs)} knobs of worker/core/knobs.h")
