"""The ``segpipe`` console script: the Go command line, run in this process
through the loader library's ``segpipe_cli`` (python/native/cli.go), so the
wheel carries one native library for the loader and the CLI.

Needs neither pyarrow nor torch: it loads the library with ctypes and hands
it ``sys.argv``. The command reads and writes file descriptors 0, 1 and 2
itself, as the segpipe binary does.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

LIBRARY_ENV = "SEGPIPE_LIBRARY"


def _library_path() -> str:
    # loader.library_path's rule, without importing loader (it needs pyarrow).
    p = os.environ.get(LIBRARY_ENV)
    if p:
        return p
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", "libsegpipe.so")


def _default_signals() -> None:
    """Gives SIGINT, SIGTERM and SIGPIPE the actions they have in the segpipe
    binary. Python catches SIGINT (to raise KeyboardInterrupt, which it can
    only do once the call into Go returns) and ignores SIGPIPE; the binary
    dies of either unless the command asks for it. A command that asks
    (convert, train and serve stop cleanly on SIGINT or SIGTERM) installs
    Go's handler over these when it starts."""
    for name in ("SIGINT", "SIGTERM", "SIGPIPE"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    """Runs the segpipe command line with argv (default sys.argv) and
    returns its exit code: 0, 1 or 2, as the binary's."""
    args = list(sys.argv if argv is None else argv)
    args[0] = "segpipe"
    path = _library_path()
    if not os.path.exists(path):
        sys.stderr.write(
            f"segpipe: no native library at {path}: this package was built without it "
            f"(SEGPIPE_NATIVE=skip); install the segpipe wheel for your platform, or set {LIBRARY_ENV}\n"
        )
        return 1
    lib = ctypes.CDLL(path)
    lib.segpipe_cli.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.segpipe_cli.restype = ctypes.c_int
    c_args = (ctypes.c_char_p * (len(args) + 1))(*[os.fsencode(a) for a in args], None)
    sys.stdout.flush()
    sys.stderr.flush()
    _default_signals()
    return lib.segpipe_cli(len(args), c_args)


def run() -> None:
    """The console script's entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
