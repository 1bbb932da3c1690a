"""Runs the Python tests with unittest and ends with "N passed, N failed,
N skipped" (skips name what was missing).

    python3 python/tests/run.py [-v] [test_x.py ...]

Test files named on the command line run alone (an install without torch
runs those that need none, test_numpy_only.py first); none named runs
every test_*.py.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _path  # noqa: E402,F401


class _Result(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.passed = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1


def main() -> int:
    args = sys.argv[1:]
    verbosity = 2 if "-v" in args else 1
    files = [a for a in args if a != "-v"]
    for f in files:
        if not (f.startswith("test_") and f.endswith(".py") and os.path.exists(os.path.join(HERE, f))):
            print(f"run.py: {f}: want the name of a test_*.py file in {HERE}")
            return 2
    if files:
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromName(f[: -len(".py")]) for f in files)
    else:
        suite = unittest.defaultTestLoader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    runner = unittest.TextTestRunner(resultclass=_Result, verbosity=verbosity, stream=sys.stdout)
    res = runner.run(suite)
    for test, why in res.skipped:
        print(f"skipped {test.id()}: {why}")
    failed = len(res.failures) + len(res.errors) + len(res.unexpectedSuccesses)
    print(f"{res.passed} passed, {failed} failed, {len(res.skipped)} skipped")
    return 1 if failed or res.testsRun == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
