"""Puts the package of this checkout first on sys.path, so that the tests
import it from the source tree, unless SEGPIPE_TEST_INSTALLED=1: then they
import the installed package (CI installs the wheel it built and tests that),
and fail if it would come from the checkout."""

import os
import sys

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(PYTHON_DIR)
if os.environ.get("SEGPIPE_TEST_INSTALLED") == "1":
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != PYTHON_DIR]
    import segpipe as _installed

    if os.path.dirname(os.path.abspath(_installed.__file__)).startswith(PYTHON_DIR + os.sep):
        raise ImportError(f"SEGPIPE_TEST_INSTALLED=1 but segpipe comes from the checkout: {_installed.__file__}")
elif sys.path[:1] != [PYTHON_DIR]:
    sys.path.insert(0, PYTHON_DIR)
