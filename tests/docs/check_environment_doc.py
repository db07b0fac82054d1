#!/usr/bin/env python3
"""docs/environment.md lists every variable of proto/worker_env.h, in the header's order.

Each `inline constexpr const char* kName = "VARIABLE";` of the header must appear, in backticks, in
a row of the page's first table, and the variables' first appearances there must follow the
header's order: the page is the header's reader-facing copy and must not drift from it.

    check_environment_doc.py REPO_ROOT
"""
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
print(f"docs/environment.md lists all {len(names)} variables of proto/worker_env.h in its order")
