"""The ctypes mirrors in larder/_lib.py match include/larder.h: a small C
program compiled against the header prints every struct's size and each
field's offset, and they must equal what ctypes computes."""

import ctypes
import os
import shutil
import subprocess

import pytest

from conftest import REPO
from larder import _lib

STRUCTS = {
    "larder_open_options": _lib.OpenOptions,
    "larder_dataset_info": _lib.DatasetInfo,
    "larder_sample_info": _lib.SampleInfo,
    "larder_field_info": _lib.FieldInfo,
    "larder_stats": _lib.Stats,
    "larder_plan_options": _lib.PlanOptions,
    "larder_plan_info": _lib.PlanInfo,
}

CONSTANTS = {
    "LARDER_MAX_DIMS": _lib.LARDER_MAX_DIMS,
    "LARDER_FILL_BUCKETS": _lib.LARDER_FILL_BUCKETS,
    "LARDER_OPEN_OPTIONS_VERSION": _lib.LARDER_OPEN_OPTIONS_VERSION,
    "LARDER_PLAN_OPTIONS_VERSION": _lib.LARDER_PLAN_OPTIONS_VERSION,
    "LARDER_PLAN_GLOBAL": _lib.PLAN_MODES["global"],
    "LARDER_PLAN_LOCALITY": _lib.PLAN_MODES["locality"],
    "LARDER_PLAN_NONE": _lib.PLAN_MODES["none"],
    **{f"LARDER_{name}": getattr(_lib, name) for name in (
        "EBADINDEX", "EVERSION", "EBADTAR", "ECHECKSUM", "ENOTFOUND", "EDUPKEY", "EUNSAFE",
        "ETRUNCATED", "EHDF5", "EHTTP", "EEMPTY", "ETOOSMALL", "EUSAGE", "EUNSUPPORTED",
        "ECACHE", "EPROTOCOL", "EDENIED")},
}


def test_struct_layouts_match_the_header(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to read the header's layouts")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "larder.h"',
             "int main(void) {"]
    for c_name, mirror in STRUCTS.items():
        lines.append(f'printf("{c_name} %zu\\n", sizeof(struct {c_name}));')
        for field, _ in mirror._fields_:
            lines.append(f'printf("{c_name}.{field} %zu\\n", '
                         f"offsetof(struct {c_name}, {field}));")
    for name in CONSTANTS:
        lines.append(f'printf("{name} %lld\\n", (long long)({name}));')
    lines += ["return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    program = tmp_path / "layout"
    subprocess.run([compiler, "-std=c11", "-I", os.path.join(REPO, "include"), str(source),
                    "-o", str(program)], check=True, capture_output=True)
    c = dict(line.rsplit(" ", 1) for line in
             subprocess.run([str(program)], check=True, capture_output=True,
                            text=True).stdout.splitlines())
    for c_name, mirror in STRUCTS.items():
        assert int(c[c_name]) == ctypes.sizeof(mirror), c_name
        for field, _ in mirror._fields_:
            assert int(c[f"{c_name}.{field}"]) == getattr(mirror, field).offset, \
                f"{c_name}.{field}"
    for name, value in CONSTANTS.items():
        assert int(c[name]) == value, name
