"""Runs the Python tests with unittest and ends with "N passed, N failed,
N skipped" (skips name what was missing).

    python3 python/tests/run.py [-v]
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
    verbosity = 2 if "-v" in sys.argv[1:] else 1
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
