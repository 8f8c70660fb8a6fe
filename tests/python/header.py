"""Reading include/larder.h for the tests that hold the Python mirrors to it.

The header is the truth: the error list comes from its LARDER_ERRNO_MAP
X-macro, the struct list and each struct's fields from its definitions,
and every offset, size and value from a C compiler that includes it, never
from Python.
"""

import os
import re
import shutil
import subprocess

from conftest import REPO

HEADER = os.path.join(REPO, "include", "larder.h")


def text():
    with open(HEADER, encoding="utf-8") as f:
        return f.read()


def _without_comments(source):
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    return re.sub(r"//[^\n]*", " ", source)


def errors():
    """[(name, value, text)] of LARDER_ERRNO_MAP, in the header's order."""
    match = re.search(r"#define LARDER_ERRNO_MAP\(X\)(.*?)(?<!\\)\n", text(), flags=re.S)
    assert match, "no LARDER_ERRNO_MAP in include/larder.h"
    entries = re.findall(r'X\(\s*(\w+)\s*,\s*(-?\d+)\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)',
                         match.group(1))
    assert entries, "LARDER_ERRNO_MAP lists no errors"
    return [(name, int(value), message) for name, value, message in entries]


def _declarators(declaration):
    """Field names declared by one member declaration ("uint64_t a, b[4]",
    "void (*fn)(void *)", "const char *const *p")."""
    declaration = " ".join(declaration.split())
    pointer_to_function = re.match(r".*?\(\s*\*\s*(\w+)\s*\)\s*\(", declaration)
    if pointer_to_function:
        return [pointer_to_function.group(1)]
    names = []
    for part in declaration.split(","):
        part = re.sub(r"\[[^\]]*\]", "", part).strip()  # array bounds
        names.append(re.findall(r"\w+", part)[-1])
    return names


def structs():
    """{"larder_x": [field, ...]} for every struct the header defines."""
    found = {}
    for name, body in re.findall(r"\bstruct\s+(larder_\w+)\s*\{(.*?)\}",
                                 _without_comments(text()), flags=re.S):
        fields = []
        for declaration in body.split(";"):
            if declaration.strip():
                fields += _declarators(declaration)
        found[name] = fields
    return found


def compile_and_run(tmp_path, body_lines):
    """Compile a C program that includes larder.h and runs body_lines in
    main(); returns its stdout's "name value" lines as a dict (values as
    str).  None when there is no C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    source = tmp_path / "probe.c"
    source.write_text("\n".join(["#include <stddef.h>", "#include <stdio.h>",
                                 '#include "larder.h"', "int main(void) {", *body_lines,
                                 "return 0;", "}"]) + "\n")
    program = tmp_path / "probe"
    built = subprocess.run([compiler, "-std=c11", "-I", os.path.join(REPO, "include"),
                            str(source), "-o", str(program)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines())
