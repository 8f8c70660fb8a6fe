"""The ctypes mirrors in larder/_lib.py match include/larder.h.

What is checked comes from the header, not from Python: every struct the
header defines is either mirrored (then with the header's fields, in its
order) or listed below as one Python does not use; a small C program
compiled against the header prints each struct's size and alignment and
each field's offset and size, and ctypes must compute the same; every
LARDER_* constant _lib defines must have the header's value."""

import ctypes
import re

import pytest

import header
from larder import _lib
from larder.hint import HOT, LARDER_HINT_OPTIONS_VERSION, REPLICATE, _HintOptions, _HintResult
from larder.names import LARDER_PUBLISH_OPTIONS_VERSION, _Publication, _PublishOptions
from larder.transform import _Transformed

STRUCTS = {
    "larder_open_options": _lib.OpenOptions,
    "larder_dataset_info": _lib.DatasetInfo,
    "larder_sample_info": _lib.SampleInfo,
    "larder_field_info": _lib.FieldInfo,
    "larder_stats": _lib.Stats,
    "larder_plan_options": _lib.PlanOptions,
    "larder_plan_info": _lib.PlanInfo,
    "larder_prefetch_options": _lib.PrefetchOptions,
    "larder_hint_options": _HintOptions,
    "larder_hint_result": _HintResult,
    "larder_publication": _Publication,  # larder/names.py's own
    "larder_publish_options": _PublishOptions,
    "larder_transformed": _Transformed,  # larder/transform.py's own
}

# Structs of the header the package does not pass to C (packing and
# indexing are the CLI's; larder_pack_options is in larder_pack.h, of the
# packing library).
NOT_MIRRORED = {"larder_pack_result", "larder_index_files_options",
                # a table of C functions a loadable transform exports (docs/transforms.md)
                "larder_transform_ops"}

# Python's names for the header's enum values.
ALIASES = {
    "LARDER_PLAN_GLOBAL": _lib.PLAN_MODES["global"],
    "LARDER_PLAN_LOCALITY": _lib.PLAN_MODES["locality"],
    "LARDER_PLAN_NONE": _lib.PLAN_MODES["none"],
    # larder/hint.py's
    "LARDER_HINT_OPTIONS_VERSION": LARDER_HINT_OPTIONS_VERSION,
    "LARDER_HINT_HOT": HOT,
    "LARDER_HINT_REPLICATE": REPLICATE,
}


@pytest.fixture(scope="module")
def header_structs():
    return header.structs()


def test_every_struct_of_the_header_is_mirrored_or_excused(header_structs):
    assert set(header_structs), "no struct definitions found in include/larder.h"
    undecided = set(header_structs) - set(STRUCTS) - NOT_MIRRORED
    assert not undecided, f"mirror these in larder/_lib.py or add them to NOT_MIRRORED: {undecided}"
    gone = (set(STRUCTS) | NOT_MIRRORED) - set(header_structs)
    assert not gone, f"no longer in include/larder.h: {gone}"


def test_mirrors_have_the_header_fields_in_order(header_structs):
    for c_name, mirror in STRUCTS.items():
        assert [field for field, _ in mirror._fields_] == header_structs[c_name], c_name


def test_struct_layouts_match_the_c_compiler(tmp_path, header_structs):
    lines = []
    for c_name, fields in header_structs.items():
        lines.append(f'printf("{c_name} %zu\\n", sizeof(struct {c_name}));')
        lines.append(f'printf("{c_name}@align %zu\\n", _Alignof(struct {c_name}));')
        for field in fields:
            lines.append(f'printf("{c_name}.{field} %zu\\n", offsetof(struct {c_name}, {field}));')
            lines.append(f'printf("{c_name}.{field}@size %zu\\n", '
                         f"sizeof(((struct {c_name} *)0)->{field}));")
    c = header.compile_and_run(tmp_path, lines)
    if c is None:
        pytest.skip("no C compiler to read the header's layouts")
    for c_name, mirror in STRUCTS.items():
        assert int(c[c_name]) == ctypes.sizeof(mirror), f"sizeof {c_name}"
        assert int(c[f"{c_name}@align"]) == ctypes.alignment(mirror), f"alignof {c_name}"
        for field, _ in mirror._fields_:
            described = getattr(mirror, field)
            assert int(c[f"{c_name}.{field}"]) == described.offset, f"{c_name}.{field} offset"
            assert int(c[f"{c_name}.{field}@size"]) == described.size, f"{c_name}.{field} size"


def test_constants_match_the_header(tmp_path):
    constants = {name: getattr(_lib, name) for name in vars(_lib)
                 if name.startswith("LARDER_") and isinstance(getattr(_lib, name), int)}
    constants.update(ALIASES)
    constants["LARDER_PUBLISH_OPTIONS_VERSION"] = LARDER_PUBLISH_OPTIONS_VERSION  # larder/names.py
    # every mirrored options struct's version must be mirrored as well
    for c_name, mirror in STRUCTS.items():
        if c_name.endswith("_options"):
            assert f"{c_name.upper()}_VERSION" in constants, c_name
    c = header.compile_and_run(
        tmp_path, [f'printf("{name} %llu\\n", (unsigned long long)({name}));'
                   for name in constants])
    if c is None:
        pytest.skip("no C compiler to read the header's constants")
    for name, value in constants.items():
        assert int(c[name]) == value % (1 << 64), name


def test_version_is_the_headers():
    # the version is written once, in the header; __version__ is the loaded
    # library's (larder_version), so the build must have taken it from there
    import larder
    match = re.search(r'^#define LARDER_VERSION_STRING "([^"]+)"$', header.text(), re.M)
    assert match, "no LARDER_VERSION_STRING in include/larder.h"
    assert larder.__version__ == match.group(1)
