"""Building the larder Python package (metadata in pyproject.toml).

The package is python/larder, pure Python over ctypes, plus liblarder.so:
build_py runs CMake and Ninja (Release) in setuptools' build directory,
build/python/temp.*/cmake, building only liblarder.so, and copies
the library into the package beside __init__.py, where larder/_lib.py
looks for it first (after LARDER_LIBRARY).  The CMake build is kept
there, so a second `pip install .` of the same tree recompiles only what
changed; remove build/python to start afresh.  Building needs what the C
build needs (scripts/install-deps); the installed package needs only the
library's runtime dependencies (libcurl, libxxhash, libcrypto).

The wheel holds a shared library, so it is a platform wheel, but no
extension module, so it fits any Python 3: py3-none-<platform>.
Editable installs (pip install -e) do not build: like PYTHONPATH=python,
they use build/liblarder.so of this tree.

The version is include/larder.h's LARDER_VERSION_STRING, the one place it
is written.
"""

import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # no wheel module: nothing to build a wheel with anyway
    bdist_wheel = None

SOURCE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "liblarder.so"


def header_version():
    """LARDER_VERSION_STRING of include/larder.h."""
    with open(os.path.join(SOURCE, "include", "larder.h"), encoding="utf-8") as header:
        match = re.search(r'^#define LARDER_VERSION_STRING "([^"]+)"', header.read(), re.M)
    if not match:
        raise RuntimeError("include/larder.h defines no LARDER_VERSION_STRING")
    return match.group(1)


class BuildWithLibrary(build_py):
    """build_py, then liblarder.so built by CMake into the package."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            self.announce("editable install: larder uses build/liblarder.so of the source tree",
                          level=2)
            return
        library = self.build_library()
        target = os.path.join(self.build_lib, "larder", LIBRARY)
        self.mkpath(os.path.dirname(target))
        shutil.copyfile(library, target)  # the file itself, not the SONAME links
        os.chmod(target, 0o755)

    def build_library(self):
        """Configure, build liblarder.so alone; the path of the library."""
        for tool in ("cmake", "ninja"):
            if not shutil.which(tool):
                raise RuntimeError(f"building liblarder needs {tool} (scripts/install-deps)")
        build_temp = self.get_finalized_command("build").build_temp
        build_dir = os.path.abspath(os.path.join(build_temp, "cmake"))
        self.run_tool(["cmake", "-S", SOURCE, "-B", build_dir, "-G", "Ninja",
                       "-DCMAKE_BUILD_TYPE=Release", "-DLARDER_UCX=OFF"])
        # by its file: ninja's `larder` is the CLI, whose file has that name
        self.run_tool(["ninja", "-C", build_dir, LIBRARY])
        return os.path.realpath(os.path.join(build_dir, LIBRARY))

    def run_tool(self, command):
        self.announce(" ".join(command), level=2)
        subprocess.run(command, check=True)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            outputs.append(os.path.join(self.build_lib, "larder", LIBRARY))
        return outputs


class BinaryDistribution(Distribution):
    """A distribution with a compiled part: installed into platlib."""

    def has_ext_modules(self):
        return True


commands = {"build_py": BuildWithLibrary}
if bdist_wheel is not None:

    class PlatformWheel(bdist_wheel):
        """py3-none-<platform>: the library ties the wheel to the platform,
        while ctypes leaves it free of any Python version or ABI."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            _, _, platform = super().get_tag()
            return "py3", "none", platform

    commands["bdist_wheel"] = PlatformWheel

setup(
    version=header_version(),
    cmdclass=commands,
    distclass=BinaryDistribution,
    # setuptools' build directory, apart from CMake's build/ of the C build
    options={"build": {"build_base": os.path.join("build", "python")}},
)
