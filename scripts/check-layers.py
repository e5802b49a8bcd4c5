#!/usr/bin/env python3
"""Checks that lib/'s folders are layers: counts the includes that run upward
in the layer order and finds include cycles.

    scripts/check-layers.py          print the upward includes; exit 1 when
                                     there are more than MAX_UPWARD or a cycle
    scripts/check-layers.py --graph  also print every include between layers

A file's layer is its folder under lib/; a public header include/redist/X.hpp
belongs to the layer of lib/*/X.cpp (or X.hpp), or to PUBLIC_ONLY below.
"""
import os
import re
import sys

ORDER = ["support", "model", "archive", "store", "transport", "pipeline", "features"]
MAX_UPWARD = 3
# Public headers without a lib/ file of the same name.
PUBLIC_ONLY = {"atomic_write": "support", "export": "support", "observer": "support", "resolve": "pipeline",
               "recompressed": "model"}  # implemented in lib/model/manifest.cpp
INCLUDE = re.compile(r'#include "(?:redist/)?(?:(\w+)/)?(\w+)\.hpp"')

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
os.chdir(root)


def lib_files():
    for layer in sorted(os.listdir("lib")):
        if layer not in ORDER:
            sys.exit(f"check-layers: lib/{layer}/ is not a layer (add it to ORDER in {sys.argv[0]})")
        for name in sorted(os.listdir(os.path.join("lib", layer))):
            yield layer, os.path.join("lib", layer, name)


layer_of_stem = {}
files = []
for layer, path in lib_files():
    layer_of_stem[os.path.splitext(os.path.basename(path))[0]] = layer
    files.append(path)
layer_of_stem.update(PUBLIC_ONLY)
for name in sorted(os.listdir("include/redist")):
    stem = os.path.splitext(name)[0]
    if stem not in layer_of_stem:
        sys.exit(f"check-layers: include/redist/{name} has no layer (no lib/*/{stem}.cpp; add it to PUBLIC_ONLY)")
    files.append(os.path.join("include/redist", name))


def node(path):
    """Header and source of one name are one node: X.hpp's cycle is X.cpp's."""
    return os.path.splitext(os.path.basename(path))[0]


edges = {}
upward = []
between = []
for path in files:
    src = node(path)
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m or m.group(2) not in layer_of_stem:
                continue
            dst = m.group(2)
            if dst == src:
                continue
            if path.endswith(".hpp"):
                edges.setdefault(src, set()).add(dst)
            a, b = ORDER.index(layer_of_stem[src]), ORDER.index(layer_of_stem[dst])
            where = f"{path}:{number}: {layer_of_stem[src]} -> {layer_of_stem[dst]} ({dst}.hpp)"
            if b > a:
                upward.append(where)
            elif b < a:
                between.append(where)

# A cycle among headers (X.hpp includes Y.hpp includes ... X.hpp).
cycles = []
state = {}


def visit(n, stack):
    state[n] = 1
    stack.append(n)
    for m in sorted(edges.get(n, ())):
        if state.get(m) == 1:
            cycles.append(" -> ".join(stack[stack.index(m):] + [m]))
        elif m not in state:
            visit(m, stack)
    stack.pop()
    state[n] = 2


for n in sorted(edges):
    if n not in state:
        visit(n, [])

if "--graph" in sys.argv:
    for line in between:
        print("down ", line)
for line in upward:
    print("UP   ", line)
for c in cycles:
    print("CYCLE", c)
print(f"check-layers: {len(upward)} upward includes (at most {MAX_UPWARD}), {len(cycles)} header cycles")
sys.exit(1 if len(upward) > MAX_UPWARD or cycles else 0)
