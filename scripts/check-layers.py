#!/usr/bin/env python3
"""Checks that lib/'s folders are layers: counts the includes that run upward
in the layer order and finds include cycles.

    scripts/check-layers.py          print the upward includes; exit 1 when
                                     there are more than MAX_UPWARD or a cycle
    scripts/check-layers.py --graph  also print every include between layers

A file's layer is its folder under lib/; a public header include/redist/X.hpp
belongs to the layer of lib/*/X.cpp (or X.hpp), or to PUBLIC_ONLY below.

It also fails on a test of a URL's scheme outside lib/transport/ and the URL
parser (lib/model/urls.*): a source's kind is chosen once per URL there
(transport/source.hpp make_source, model/urls.hpp source_kind_of). In
lib/ and tools/, code (comments removed) may not call is_oci_url,
is_oci_layout_url, is_file_url or is_local_url, nor hold a string literal
that is only a scheme ("file://", "oci://", "oci-layout:"), nor compare a
text's start with one; a scheme inside longer text (--help) is fine.
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

SCHEME_TEST = re.compile(
    r'\b(is_oci_url|is_oci_layout_url|is_file_url|is_local_url)\s*\('
    r'|"(?:https?|file|oci|oci\+http)://"|"(?:oci-layout|file):"'
    r'|(?:starts_with|find|rfind|compare|iequals_prefix)\s*\([^;]*"(?:https?|file|oci|oci\+http|oci-layout):')


def code_only(line, in_block):
    """`line` without its comments (// and /* */), string literals kept;
    and whether a /* comment is still open at its end."""
    out = []
    i, quote = 0, None
    while i < len(line):
        c = line[i]
        if in_block:
            if line.startswith("*/", i):
                in_block = False
                i += 2
            else:
                i += 1
            continue
        if quote:
            out.append(c)
            if c == "\\" and i + 1 < len(line):
                out.append(line[i + 1])
                i += 2
                continue
            if c == quote:
                quote = None
            i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if c in "\"'":
            quote = c
        out.append(c)
        i += 1
    return "".join(out), in_block


def scheme_tests():
    """Lines of lib/ and tools/ (outside lib/transport/ and lib/model/urls.*)
    that test a URL's scheme."""
    found = []
    for top in ("lib", "tools"):
        for folder, _, names in os.walk(top):
            for name in sorted(names):
                path = os.path.join(folder, name)
                if not name.endswith((".cpp", ".hpp")) or path.startswith(os.path.join("lib", "transport", "")):
                    continue
                if os.path.dirname(path) == os.path.join("lib", "model") and name.startswith("urls."):
                    continue
                in_block = False
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        code, in_block = code_only(line, in_block)
                        if SCHEME_TEST.search(code):
                            found.append(f"{path}:{number}: {line.strip()}")
    return sorted(found)


schemes = scheme_tests()

if "--graph" in sys.argv:
    for line in between:
        print("down ", line)
for line in upward:
    print("UP   ", line)
for c in cycles:
    print("CYCLE", c)
for line in schemes:
    print("SCHEME", line)
print(f"check-layers: {len(upward)} upward includes (at most {MAX_UPWARD}), {len(cycles)} header cycles, "
      f"{len(schemes)} scheme tests outside lib/transport/ and lib/model/urls.*")
sys.exit(1 if len(upward) > MAX_UPWARD or cycles or schemes else 0)
