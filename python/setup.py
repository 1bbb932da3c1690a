"""Builds the loader library into the package (pyproject.toml has the rest).

`pip install ./python` from a checkout and `pip wheel ./python` both run
build_py, which builds python/native with `go build -buildmode=c-shared`
(scripts/build-native.sh: needs Go and a C compiler) into
segpipe/_native/libsegpipe.so. The wheel is then tagged for this platform
only (py3-none-<platform>): the library depends on no Python ABI.
SEGPIPE_NATIVE=skip builds a pure-Python package without it (FlightBatches
only; segpipe.Loader then says how to get the library). SEGPIPE_GOARCH=arm64
(with CC a C compiler for it, e.g. CC=aarch64-linux-gnu-gcc) cross-builds
the library and tags the wheel for that machine: a Linux arm64 wheel from an
x86_64 host.

The wheel's tag names the platform only (linux_x86_64); a package index
takes it once auditwheel has checked the library and retagged the wheel
manylinux: scripts/build-wheels.sh does both. The library is also the
`segpipe` console script's command line (segpipe._cli), and reports
segpipe.__version__, the package's one version: build_py passes it to
the library's build as SEGPIPE_VERSION unless that is set.
"""

import os
import re
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def package_version() -> str:
    """segpipe.__version__, read without importing the package."""
    with open(os.path.join(HERE, "segpipe", "__init__.py")) as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        sys.exit("segpipe: no __version__ line in segpipe/__init__.py")
    return m.group(1)


def native_wanted() -> bool:
    return os.environ.get("SEGPIPE_NATIVE", "build") != "skip"


class BuildWithNative(build_py):
    def run(self):
        super().run()
        if not native_wanted():
            return
        script = os.path.join(REPO, "scripts", "build-native.sh")
        if not os.path.exists(script):
            sys.exit(f"segpipe: {script} not found: the loader library builds from a segpipe checkout "
                     "(or set SEGPIPE_NATIVE=skip for the Flight client alone)")
        out = os.path.join(os.path.abspath(self.build_lib), "segpipe", "_native")
        os.makedirs(out, exist_ok=True)
        args = ["bash", script, out] + ([target_goarch()] if target_goarch() else [])
        env = dict(os.environ)
        env.setdefault("SEGPIPE_VERSION", package_version())
        subprocess.run(args, cwd=REPO, check=True, env=env)


# Go's names for the machines a wheel's platform tag names.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}


def target_goarch() -> str:
    """The GOARCH to cross-build for ("" for this machine's)."""
    arch = os.environ.get("SEGPIPE_GOARCH", "")
    if arch and arch not in MACHINES:
        sys.exit(f"segpipe: SEGPIPE_GOARCH={arch}: want one of {', '.join(MACHINES)}")
    return arch


class PlatformDistribution(Distribution):
    def has_ext_modules(self):
        return native_wanted()


cmdclass = {"build_py": BuildWithNative}
try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        _, _, plat = super().get_tag()
        if not native_wanted():
            return ("py3", "none", "any")
        arch = target_goarch()
        if arch:
            # linux_x86_64 → linux_aarch64: the library is the wheel's only
            # machine code.
            for machine in MACHINES.values():
                if plat.endswith("_" + machine):
                    plat = plat[: -len(machine)] + MACHINES[arch]
        return ("py3", "none", plat)


cmdclass["bdist_wheel"] = PlatformWheel
setup(cmdclass=cmdclass, distclass=PlatformDistribution)
