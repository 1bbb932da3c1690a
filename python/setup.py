"""Builds the loader library into the package (pyproject.toml has the rest).

`pip install ./python` from a checkout and `pip wheel ./python` both run
build_py, which builds python/native with `go build -buildmode=c-shared`
(scripts/build-native.sh: needs Go and a C compiler) into
segpipe/_native/libsegpipe.so. The wheel is then tagged for this platform
only (py3-none-<platform>): the library depends on no Python ABI.
SEGPIPE_NATIVE=skip builds a pure-Python package without it (FlightBatches
only; segpipe.Loader then says how to get the library).
"""

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


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
        subprocess.run(["bash", script, out], cwd=REPO, check=True)


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
        return ("py3", "none", plat) if native_wanted() else ("py3", "none", "any")


cmdclass["bdist_wheel"] = PlatformWheel
setup(cmdclass=cmdclass, distclass=PlatformDistribution)
