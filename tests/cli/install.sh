# The standard installs, each used from outside the source tree:
#  (a) `cmake --install` of this build into a prefix: a C program built with
#      `pkg-config --cflags --libs larder` alone reads a sample; the SONAME
#      links, larder.pc and the installed programs work; the man pages
#      describe every option --help lists, and man renders them cleanly;
#  (c) `python3 -m build --no-isolation --wheel` from a copy of the source
#      tree: a py3-none platform wheel holding liblarder.so, which needs
#      only the runtime libraries; installed into a bare venv, it reads;
#  (b) `pip install --no-build-isolation --no-index` of that copy (through
#      scripts/install-python) into a venv with the system's site packages,
#      for Debian's PyTorch: larder and larder.torch import and read, and
#      pip uninstalls it whole.
# (c) runs before (b), which reuses its CMake build (setup.py keeps it in
# the copy's build/python/).  The Python parts build liblarder afresh, in
# Release, whatever this build is, so a sanitizer build runs (a) only.
# Everything lives under $WORK; pip is kept off the network and its cache.
source "$(dirname "$0")/lib.sh"
REPO=$(cd "$TESTS/.." && pwd)
BUILD_DIR=$(cd "$(dirname "$LARDER")" && pwd)
PYTHON=/usr/bin/python3
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset LARDER_LIBRARY PYTHONPATH

version=$(sed -n 's/^#define LARDER_VERSION_STRING "\(.*\)"$/\1/p' "$REPO/include/larder.h")
[ -n "$version" ] || fail "include/larder.h has no LARDER_VERSION_STRING"
for tool in cmake ninja pkg-config cc readelf; do
  command -v $tool >/dev/null || skip "$tool is not installed (scripts/install-deps installs it)"
done
if [ $sanitizer_build -eq 0 ]; then
  for module in venv ensurepip pip setuptools wheel build; do
    $PYTHON -c "import $module" 2>/dev/null ||
      skip "python3 module $module is missing (scripts/install-deps installs it)"
  done
fi

# library_needs FILE: the shared libraries FILE names (NEEDED), one a line
library_needs() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort; }

make_tree src 24
"$LARDER" pack src -o packed --shard-size 64K >/dev/null
index=$WORK/packed/index.larder

# ---- (a) cmake --install, for C programs ----------------------------------
start=$SECONDS
prefix=$WORK/prefix
cmake --install "$BUILD_DIR" --prefix "$prefix" >install.log || fail "cmake --install: $(cat install.log)"
pc=$(find "$prefix" -name larder.pc)
[ -n "$pc" ] || fail "no larder.pc under $prefix"
libdir=$(dirname "$(dirname "$pc")")
for f in include/larder.h bin/larder bin/larderd share/man/man1/larder.1 share/man/man8/larderd.8; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
[ ! -e "$prefix/include/larder_pack.h" ] || fail "larder_pack.h is installed, its library is not"
[ -f "$libdir/liblarder.so.$version" ] || fail "no liblarder.so.$version in $libdir"
[ "$(readlink "$libdir/liblarder.so.0")" = "liblarder.so.$version" ] || fail "liblarder.so.0 link"
[ "$(readlink "$libdir/liblarder.so")" = liblarder.so.0 ] || fail "liblarder.so link"
readelf -d "$libdir/liblarder.so.$version" | grep -q 'SONAME.*\[liblarder\.so\.0\]' || fail "SONAME"
grep -qx "prefix=$prefix" "$pc" || fail "larder.pc names another prefix: $(cat "$pc")"

export PKG_CONFIG_PATH=$(dirname "$pc")
[ "$(pkg-config --modversion larder)" = "$version" ] || fail "pkg-config --modversion larder"
static_libs=$(pkg-config --static --libs larder)
for lib in -llarder -lcurl -lxxhash -lcrypto -pthread; do
  [[ " $static_libs " == *" $lib "* ]] || fail "pkg-config --static --libs lacks $lib: $static_libs"
done
sanitize_flags=()
[ $sanitizer_build -eq 1 ] && sanitize_flags=(-fsanitize=address,undefined)
# shellcheck disable=SC2046 # pkg-config's words are separate arguments
cc -std=c11 -Wall -Wextra -Werror "${sanitize_flags[@]}" "$TESTS/cli/install_reader.c" \
  -o reader $(pkg-config --cflags --libs larder) || fail "the C program does not build"
library_needs reader | grep -qx liblarder.so.0 || fail "reader does not need liblarder.so.0"
for key in sample00007 sample00020; do
  LD_LIBRARY_PATH=$libdir ./reader "$index" $key jpg src/$key.jpg >reader.txt ||
    fail "reader $key: $(cat reader.txt)"
done
grep -q "^larder $version: sample00020.jpg" reader.txt || fail "reader says: $(cat reader.txt)"
# the wrong bytes are found wrong
expect_error 1 "not the" env LD_LIBRARY_PATH="$libdir" ./reader "$index" sample00007 jpg src/sample00008.jpg

# the installed programs
[ "$("$prefix/bin/larder" --version)" = "larder $version" ] || fail "installed larder --version"
"$prefix/bin/larder" cat "$index" sample00003 --field cls | cmp -s - src/sample00003.cls ||
  fail "installed larder cat"
# (through a file: grep -q leaves at the first line, and larderd writing
# the rest into the closed pipe dies of SIGPIPE, which pipefail reports)
"$prefix/bin/larderd" --help >larderd-help.txt || fail "installed larderd --help: status $?"
grep -q "^usage: larderd" larderd-help.txt || fail "installed larderd --help"

# the man pages: every option of every --help, and a clean rendering
# man_lacks PAGE PROGRAM...: the options (--name) the --help of PROGRAM...
# lists that PAGE does not describe
man_lacks() {
  local page=$1 option
  shift
  "$@" --help | { grep -oE -- '--[a-z0-9-]+' || true; } | sort -u | while read -r option; do
    grep -qF -- "${option//-/\\-}" "$page" || echo "$option"
  done
}
page=$prefix/share/man/man1/larder.1
grep -q "^\.TH LARDER 1 .*\"larder $version\"" "$page" || fail "larder.1 names no version $version"
for command in pack index inspect verify cat warm stat plan hint publish consume names; do
  grep -qF "\\fB$command\\fR" "$page" || fail "larder.1 lacks the command $command"
  missing=$(man_lacks "$page" "$LARDER" $command)
  [ -z "$missing" ] || fail "larder.1 lacks larder $command's" $missing
done
missing=$(man_lacks "$page" "$LARDER")
[ -z "$missing" ] || fail "larder.1 lacks larder's" $missing
page=$prefix/share/man/man8/larderd.8
missing=$(man_lacks "$page" "$prefix/bin/larderd")
[ -z "$missing" ] || fail "larderd.8 lacks larderd's" $missing
if command -v man >/dev/null; then
  for page in man1/larder.1 man8/larderd.8; do
    LC_ALL=C.UTF-8 MANWIDTH=80 MAN_DISABLE_SECCOMP=1 man --warnings -l "$prefix/share/man/$page" \
      >man.txt 2>man.err || fail "man -l $page: $(cat man.err)"
    [ ! -s man.err ] || fail "man -l $page warns: $(cat man.err)"
    for section in NAME SYNOPSIS ENVIRONMENT "EXIT STATUS" FILES; do
      grep -q "^$section" man.txt || fail "$page has no $section section"
    done
  done
else
  echo "man is not installed: the pages are not rendered"
fi
echo "cmake --install and its checks: $((SECONDS - start)) s"

if [ $sanitizer_build -eq 1 ]; then
  echo "a sanitizer build: the Python installs (a Release build of their own) are left out"
  exit 0
fi

# read_back PYTHON: in PYTHON, from /, the installed larder reads the packed
# dataset with the library inside the package; extra code on stdin runs after
read_back() {
  local python=$1 extra
  extra=$(cat)
  (cd / && "$python" - "$index" "$WORK/src" "$version" <<PY) || fail "$python cannot read with larder"
import importlib.metadata, os, sys
import larder
index, src, version = sys.argv[1:]
package = os.path.dirname(larder.__file__)
assert not package.startswith("$REPO") and not package.startswith("$WORK/tree"), package
assert larder.library_path() == os.path.join(package, "liblarder.so"), larder.library_path()
assert larder.__version__ == version, (larder.__version__, version)
assert importlib.metadata.version("larder") == version, importlib.metadata.version("larder")
with larder.Dataset(index, cache="") as ds:
    for key in ("sample00001", "sample00024"):
        sample = ds[ds.index_of(key)]
        for field in ("jpg", "cls"):
            with open(os.path.join(src, f"{key}.{field}"), "rb") as f:
                assert sample[field] == f.read(), (key, field)
$extra
print("read back with", larder.library_path())
PY
}

# a copy of the source tree, as a clone would have it
mkdir tree
tar -C "$REPO" --exclude=./.git --exclude='./build*' --exclude=./dist --exclude='*.egg-info' \
  --exclude=__pycache__ --exclude=./python/larder/liblarder.so --exclude=./bench/work -cf - . |
  tar -C tree -xf -

# ---- (c) a wheel, into a venv without the system's packages ---------------
start=$SECONDS
(cd tree && $PYTHON -m build --no-isolation --wheel --outdir "$WORK/dist") >wheel.log 2>&1 ||
  fail "python3 -m build: $(tail -30 wheel.log)"
wheel=$(ls "$WORK"/dist/*.whl)
[ "$(basename "$wheel")" = "larder-$version-py3-none-linux_$(uname -m).whl" ] ||
  fail "wheel named $(basename "$wheel")"
$PYTHON - "$wheel" <<'PY' || fail "wheel contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for name in ("larder/__init__.py", "larder/_lib.py", "larder/torch.py", "larder/liblarder.so"):
    assert name in names, (name, names)
wheel_file = [n for n in names if n.endswith(".dist-info/WHEEL")]
text = zipfile.ZipFile(sys.argv[1]).read(wheel_file[0]).decode()
assert "Root-Is-Purelib: false" in text, text
PY
mkdir unpacked && (cd unpacked && $PYTHON -m zipfile -e "$wheel" .)
# what a machine needs to load it: libcurl, libxxhash, libcrypto, libc, and
# for the built-in transforms libturbojpeg and libzstd (docs/transforms.md)
unexpected=$(library_needs unpacked/larder/liblarder.so |
  grep -vxE 'libcurl\.so\.4|libxxhash\.so\.0|libcrypto\.so\.3|libc\.so\.6|libm\.so\.6|libturbojpeg\.so\.0|libzstd\.so\.1|ld-linux[-a-z0-9_.]*\.so\.[0-9]' || true)
[ -z "$unexpected" ] || fail "the wheel's library needs" $unexpected
! readelf -d unpacked/larder/liblarder.so | grep -qE 'RPATH|RUNPATH' || fail "the wheel's library has an rpath"
$PYTHON -m venv bare
bare/bin/python -m pip install -q --no-index "$wheel" >pip-wheel.log 2>&1 ||
  fail "pip install the wheel: $(cat pip-wheel.log)"
read_back "$WORK/bare/bin/python" </dev/null
echo "wheel built, installed and read: $((SECONDS - start)) s"

# ---- (b) pip install of the source tree, into a venv with torch ----------
start=$SECONDS
$PYTHON -m venv --system-site-packages venv
PYTHON=$WORK/venv/bin/python tree/scripts/install-python -q >pip.log 2>&1 ||
  fail "pip install: $(tail -30 pip.log)"
read_back "$WORK/venv/bin/python" <<'PY'
import larder.torch
ds = larder.torch.IterableDataset(index, cache="", seed=1, batch_size=4, shuffle=False,
                                  rank=0, world=1)
first = next(iter(ds))
assert first["__key__"] == larder.Dataset(index, cache="").key(0), first["__key__"]
PY
site=$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
[ -f "$site/larder/liblarder.so" ] || fail "no liblarder.so in $site/larder"
venv/bin/python -m pip uninstall -y -q larder >uninstall.log 2>&1 || fail "pip uninstall: $(cat uninstall.log)"
[ ! -e "$site/larder" ] || fail "pip uninstall left $(ls "$site/larder")"
echo "pip install of the source tree and uninstall: $((SECONDS - start)) s"
