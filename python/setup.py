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

The sdist (``python -m build --sdist python``, from a checkout with Go)
carries the Go source the library builds from, under gosrc/: go.mod,
go.sum, scripts/build-native.sh and the files of every package of the module
that python/native imports on linux amd64 and arm64 (``go list -deps``).
Installing it builds the library as a checkout does, and needs Go at least
go.mod's ``go`` version, a C compiler, and the module's dependencies (from
the module proxy or GOMODCACHE). Where Go or the compiler is missing, or
Go is older, the build stops before compiling anything, with one line
naming what is missing, the Go version, and that the wheels need none of
it; a go build that fails (a module it cannot download) ends with go's own
output and one line after it.
"""

import json
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "github.com/segpipe/segpipe"
#: Where the sdist keeps the Go module's source (a checkout has it at ..).
GOSRC = "gosrc"


def go_root() -> str:
    """The Go module to build the library from: the sdist's gosrc/, else the
    checkout this python/ folder sits in ("" for neither)."""
    for root in (os.path.join(HERE, GOSRC), os.path.dirname(HERE)):
        if go_mod_version(root) is not None:
            return root
    return ""


def go_mod_version(root: str) -> "tuple[int, ...] | None":
    """The ``go`` line of root/go.mod when it is segpipe's module, else None."""
    try:
        with open(os.path.join(root, "go.mod")) as f:
            text = f.read()
    except OSError:
        return None
    if not re.search(r"^module " + re.escape(MODULE) + r"\s*$", text, re.M):
        return None
    m = re.search(r"^go (\d+(?:\.\d+)*)\s*$", text, re.M)
    return tuple(int(x) for x in m.group(1).split(".")) if m else (0,)


def _dotted(v) -> str:
    return ".".join(str(x) for x in v)


WHEELS = "the segpipe wheels (pip install segpipe, manylinux x86_64 and aarch64) need neither"


def _stop(what: str) -> None:
    # One line, before anything is compiled: the pip output around it is
    # pip's, and a go build failure would be a page of compiler output.
    sys.exit(f"segpipe: building the loader library from source needs {what}; {WHEELS} "
             "(SEGPIPE_NATIVE=skip builds the Flight client alone)")


def check_toolchain(root: str) -> None:
    """Stop with one line unless go >= go.mod's version and a C compiler
    for the target are on PATH."""
    want = go_mod_version(root)
    go = shutil.which("go")
    if go is None:
        _stop(f"Go >= {_dotted(want)} on PATH (go not found) and a C compiler")
    # GOTOOLCHAIN=local, outside the module: the installed toolchain's own
    # version, not one go.mod would make it download.
    try:
        p = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, cwd=os.path.abspath(os.sep),
                           env=dict(os.environ, GOTOOLCHAIN="local"), timeout=60)
        got = p.stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        got = f"unusable: {e}"
    m = re.match(r"go(\d+(?:\.\d+)*)", got)
    have = tuple(int(x) for x in m.group(1).split(".")) if m else None
    if have is None or have < want:
        _stop(f"Go >= {_dotted(want)} (go.mod's go line), found {got or 'no version'} at {go}")
    # go's default C compiler is gcc, else clang; CC may carry arguments
    # ("zig cc -target ...").
    cc = os.environ.get("CC", "").split()
    candidates = cc[:1] or ["gcc", "clang"]
    if not any(shutil.which(c) for c in candidates):
        _stop(f"a C compiler for cgo ({' or '.join(candidates)} not found; set CC) as well as Go {_dotted(have)}")


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
        root = go_root() if native_wanted() else ""
        if native_wanted():
            if not root:
                sys.exit(f"segpipe: no Go source here ({os.path.join(HERE, GOSRC)} or {os.path.dirname(HERE)}/go.mod): "
                         f"the loader library builds from a segpipe checkout or sdist; {WHEELS}")
            check_toolchain(root)
        super().run()
        if not native_wanted():
            return
        script = os.path.join(root, "scripts", "build-native.sh")
        out = os.path.join(os.path.abspath(self.build_lib), "segpipe", "_native")
        os.makedirs(out, exist_ok=True)
        args = ["bash", script, out] + ([target_goarch()] if target_goarch() else [])
        env = dict(os.environ)
        env.setdefault("SEGPIPE_VERSION", package_version())
        try:
            subprocess.run(args, cwd=root, check=True, env=env)
        except subprocess.CalledProcessError as e:
            # go build's own output above says why (often a module it could
            # not download: GOPROXY, GOFLAGS=-mod=mod, GOMODCACHE).
            sys.exit(f"segpipe: building the loader library failed (exit {e.returncode}, go build's output above); {WHEELS}")


#: go list's file lists a package builds from (tests left out).
_GO_FILE_KEYS = ("GoFiles", "CgoFiles", "CFiles", "CXXFiles", "HFiles", "SFiles", "SysoFiles", "EmbedFiles")


def go_sources(root: str) -> list[str]:
    """Files, relative to root, the library's build reads: go.mod, go.sum,
    the build script, the header, and each module package's files that
    python/native imports on linux amd64 or arm64."""
    files = {"go.mod", "go.sum", "scripts/build-native.sh", "python/native/segpipe.h"}
    for goarch in MACHINES:
        env = dict(os.environ, GOOS="linux", GOARCH=goarch, CGO_ENABLED="1")
        p = subprocess.run(["go", "list", "-deps", "-json", "./python/native"], cwd=root, env=env,
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"segpipe: go list -deps ./python/native (GOARCH={goarch}) failed: {p.stderr.strip()}")
        dec, text, i = json.JSONDecoder(), p.stdout, 0
        while i < len(text):
            if text[i].isspace():
                i += 1
                continue
            pkg, i = dec.raw_decode(text, i)
            if (pkg.get("Module") or {}).get("Path") != MODULE:
                continue
            rel = os.path.relpath(pkg["Dir"], root)
            for key in _GO_FILE_KEYS:
                files.update(os.path.join(rel, f) for f in pkg.get(key) or [])
    return sorted(files)


class SdistWithGo(sdist):
    """An sdist that builds: the Python package plus, under gosrc/, the Go
    source of its library (see the module doc). Made from a checkout, with
    Go on PATH to list the packages."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = os.path.dirname(HERE)
        if go_mod_version(root) is None:
            sys.exit(f"segpipe: the sdist is made from a segpipe checkout ({root}/go.mod is not {MODULE}'s)")
        if shutil.which("go") is None:
            sys.exit("segpipe: making the sdist needs Go on PATH (go list picks the library's source files)")
        for rel in go_sources(root):
            dst = os.path.join(base_dir, GOSRC, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(root, rel), dst)


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


cmdclass = {"build_py": BuildWithNative, "sdist": SdistWithGo}
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
