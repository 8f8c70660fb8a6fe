"""larder's error codes in Python cannot drift from include/larder.h: every
entry of the header's LARDER_ERRNO_MAP must be in larder._lib and exported
by the larder package under the same name with the same value, Python must
list no code the header lacks, and larder_strerror must give the header's
text for each."""

import re

import pytest

import header
import larder
from larder import _lib


@pytest.fixture(scope="module")
def header_errors():
    return header.errors()


def test_python_has_every_error_of_the_header(header_errors):
    for name, value, _ in header_errors:
        assert getattr(_lib, name, None) == value, f"larder._lib.{name} should be {value}"
        assert getattr(larder, name, None) == value, f"larder.{name} should be {value}"
        assert name in larder.__all__, f"larder.__all__ lacks {name}"


def test_python_has_no_error_the_header_lacks(header_errors):
    known = {name for name, _, _ in header_errors}
    mirrored = {name for name in vars(_lib) if re.fullmatch(r"E[A-Z0-9]+", name)}
    exported = {name for name in larder.__all__ if re.fullmatch(r"E[A-Z0-9]+", name)}
    assert mirrored - known == set(), "larder._lib has codes include/larder.h does not"
    assert exported - known == set(), "larder.__all__ has codes include/larder.h does not"


def test_values_agree_with_the_c_compiler(tmp_path, header_errors):
    c = header.compile_and_run(
        tmp_path, [f'printf("{name} %d\\n", (int)LARDER_{name});' for name, _, _ in header_errors])
    if c is None:
        pytest.skip("no C compiler to read the header's values")
    for name, value, _ in header_errors:
        assert int(c[name]) == value == getattr(_lib, name), name


def test_strerror_gives_the_header_text(header_errors):
    for name, value, text in header_errors:
        assert _lib.strerror(value) == text, name
        assert larder.strerror(getattr(larder, name)) == text, name
