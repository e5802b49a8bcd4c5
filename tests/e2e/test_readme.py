"""README.md stays a short page for users, and the documentation's links hold:
README.md has at most 200 lines (the rest lives in docs/), and every relative
link in README.md and docs/*.md names a file that exists and, with a #fragment,
a heading in it."""

import os
import re
import tempfile
import unittest

import support

MAX_README_LINES = 200

LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def without_code_blocks(text):
    """The text with fenced code blocks blanked (their lines kept, so line numbers hold)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return out


def anchors(path):
    """The #fragments GitHub gives the headings of a Markdown file."""
    with open(path, encoding="utf-8") as f:
        lines = without_code_blocks(f.read())
    seen, result = {}, set()
    for line in lines:
        m = HEADING.match(line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result


def documents():
    root = support.source_dir()
    docs = os.path.join(root, "docs")
    return [os.path.join(root, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def relative_links(path):
    """(line number, target) of every link that is not a URL."""
    with open(path, encoding="utf-8") as f:
        lines = without_code_blocks(f.read())
    for number, line in enumerate(lines, 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                yield number, target


def broken_links(doc):
    """One line per relative link in `doc` whose file or heading does not exist."""
    problems = []
    for number, target in relative_links(doc):
        where = f"{os.path.basename(doc)}:{number}: {target}"
        file_part, _, fragment = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(doc), file_part)) if file_part else doc
        if not os.path.exists(dest):
            problems.append(f"{where}: no such file")
        elif fragment and dest.endswith(".md") and os.path.isfile(dest) and fragment not in anchors(dest):
            problems.append(f"{where}: no such heading in {os.path.basename(dest)}")
    return problems


class Readme(unittest.TestCase):
    def test_readme_is_short(self):
        with open(os.path.join(support.source_dir(), "README.md"), encoding="utf-8") as f:
            count = len(f.read().splitlines())
        self.assertLessEqual(count, MAX_README_LINES,
                             f"README.md has {count} lines; move details into docs/ (docs/developing.md)")

    def test_relative_links_point_at_existing_files_and_headings(self):
        docs = documents()
        self.assertGreater(len(docs), 5)
        self.assertGreater(sum(len(list(relative_links(d))) for d in docs), 10)  # the pattern finds them
        problems = [p for d in docs for p in broken_links(d)]
        self.assertEqual(problems, [])

    def test_a_broken_link_or_heading_is_found(self):
        with tempfile.TemporaryDirectory() as tmp:
            doc = os.path.join(tmp, "page.md")
            with open(doc, "w", encoding="utf-8") as f:
                f.write("# A page\n\n## `redist cache prune --max-size SIZE`\n\n"
                        "[ok](#a-page) [ok](page.md#redist-cache-prune---max-size-size) "
                        "[site](https://example.invalid/x) [gone](missing.md)\n"
                        "[bad heading](#no-such-heading)\n```\n[in code](nowhere.md)\n```\n")
            self.assertEqual(broken_links(doc), ["page.md:5: missing.md: no such file",
                                                 "page.md:6: #no-such-heading: no such heading in page.md"])


if __name__ == "__main__":
    unittest.main()
