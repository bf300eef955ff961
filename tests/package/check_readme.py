#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The README's code blocks, as written, against the library (the CTest test
`readme_snippets`):

- a block whose first three lines name a file under examples/ must be that file,
  byte for byte (the file itself is built and run by its own test);
- every ```c block compiles as C11 with -Wall -Wextra -Wpedantic -Werror
  against include/qkvfuse.h; one with a main() is also linked against the
  library and run, and must exit 0;
- every ```python block is valid Python.

    check_readme.py --readme README.md --source-dir DIR --cc CC --library LIB --work DIR
"""
import argparse
import ast
import os
import re
import subprocess
import sys

FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
NAMES_FILE = re.compile(r"\b(examples/[A-Za-z0-9_.-]+)")


def blocks(text):
    """(language, code, line number of the opening fence) of each fenced block."""
    for m in FENCE.finditer(text):
        yield m.group(1).lower(), m.group(2), text.count("\n", 0, m.start()) + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("--library", required=True, help="libqkvfuse.so to link and run against")
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    with open(a.readme, encoding="utf-8") as f:
        text = f.read()
    failures, counts = [], {"c": 0, "python": 0, "examples": 0}
    include = os.path.join(a.source_dir, "include")
    libdir = os.path.dirname(os.path.abspath(a.library))
    for lang, code, line in blocks(text):
        where = "%s:%d (```%s)" % (os.path.basename(a.readme), line, lang)
        head = "\n".join(code.split("\n", 3)[:3])  # the file's name is in its first lines (a licence line may lead)
        named = NAMES_FILE.search(head) if lang in ("c", "python") else None
        if named:
            path = os.path.join(a.source_dir, named.group(1))
            try:
                with open(path, encoding="utf-8") as f:
                    same = f.read() == code
            except OSError as e:
                failures.append("%s names %s: %s" % (where, named.group(1), e))
                continue
            counts["examples"] += 1
            if not same:
                failures.append("%s differs from %s: copy the file into the README" % (where, named.group(1)))
        if lang == "c":
            counts["c"] += 1
            src = os.path.join(a.work, "readme_%d.c" % line)
            with open(src, "w", encoding="utf-8") as f:
                f.write(code)
            has_main = re.search(r"\bint\s+main\s*\(", code) is not None
            out = src[:-2] + (".bin" if has_main else ".o")
            cmd = [a.cc, "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-I", include, src, "-o", out]
            cmd += ["-L", libdir, "-lqkvfuse", "-Wl,-rpath," + libdir, "-lm"] if has_main else ["-c"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                failures.append("%s does not compile:\n  %s\n%s" % (where, " ".join(cmd), r.stdout + r.stderr))
                continue
            if has_main:
                r = subprocess.run([out], capture_output=True, text=True, timeout=120)
                if r.returncode != 0:
                    failures.append("%s exits %d:\n%s" % (where, r.returncode, r.stdout + r.stderr))
        elif lang == "python":
            counts["python"] += 1
            try:
                ast.parse(code, filename=where)
            except SyntaxError as e:
                failures.append("%s is not valid Python: %s" % (where, e))
    print("check_readme: %d C blocks, %d Python blocks, %d example files" % (counts["c"], counts["python"],
                                                                            counts["examples"]))
    if counts["c"] == 0:
        failures.append("no ```c block found in %s" % a.readme)
    for f in failures:
        print("check_readme: FAIL: " + f)
    print("check_readme: %s" % ("ok" if not failures else "%d failure(s)" % len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
