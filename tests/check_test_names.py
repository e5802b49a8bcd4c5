#!/usr/bin/env python3
"""Fail when a Catch2 TEST_CASE name would be mangled by catch_discover_tests.

CMake treats the discovered names as a list: a ';' splits one test into two
CTest entries, and a '[' without its ']' glues every later name of the
binary into one entry. A backslash is an escape in Catch's test filter, so
the entry's name matches nothing. Either way CTest runs a name that matches nothing (or
the wrong tests) and, without "--warn NoTests", reports it as passed.
Usage: check_test_names.py UNIT_TEST_BINARY...
"""
import subprocess
import sys

FORBIDDEN = set(";[]\\")

bad = []
for binary in sys.argv[1:]:
    # Catch2 v2 exits with the number of tests listed, so the status says nothing.
    names = subprocess.run([binary, "--list-test-names-only"],
                           capture_output=True, text=True).stdout.splitlines()
    if not names:
        bad.append(f"{binary}: lists no tests")
    for name in names:
        if FORBIDDEN & set(name) or name != name.strip():
            bad.append(f"{binary}: {name!r}: no ';', '[', ']' or backslash in a test name, and no edge spaces")
for line in bad:
    print(line, file=sys.stderr)
sys.exit(1 if bad else 0)
