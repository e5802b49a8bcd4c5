#!/usr/bin/env python3
"""skip-report.py BUILD_DIR: how many tests the last ctest run in BUILD_DIR
skipped, and why, from its log (Testing/Temporary/LastTest.log): every e2e
test that Python's unittest skipped (`... skipped 'reason'`), and every CTest
test that was not run. A pass that skips says so in the suite's output, with
the reasons grouped, instead of looking like a pass of everything. Exits 0
whatever it finds: the reasons are information, the tests decide."""
import collections
import os
import re
import sys

log = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "Testing", "Temporary", "LastTest.log")
try:
    with open(log, errors="replace") as f:
        text = f.read()
except OSError as e:
    print(f"skip-report: cannot read {log}: {e.strerror}")
    sys.exit(0)
reasons = collections.Counter()
for m in re.finditer(r"^(\S+) \((\S+)\)(?: \.\.\. |\n.*?\.\.\. )skipped '(.*)'$", text, re.M):
    reasons[m.group(3)] += 1
not_run = re.findall(r"^\s*\d+/\d+ Test\s+#\d+: (\S+) \.+\*+Not Run", text, re.M)
total = sum(reasons.values())
where = os.path.dirname(os.path.dirname(os.path.dirname(log)))
print(f"skip-report ({where}): {total} e2e test(s) skipped, {len(not_run)} CTest test(s) not run")
for why, n in reasons.most_common():
    print(f"  {n:4d} skipped: {why}")
for name in not_run:
    print(f"       not run: {name}")
