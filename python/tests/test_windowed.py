"""The numpy mask expander against raster.Expand, through the fixture that
`go run ./python/tests/gen_windowed` writes. Needs numpy; set
SEGPIPE_REQUIRE_NUMPY=1 (CI does) to make its absence a failure."""

import base64
import json
import os
import unittest

import _path  # noqa: F401

try:
    import numpy as np
except ImportError:  # pragma: no cover - depends on the machine
    np = None
    if os.environ.get("SEGPIPE_REQUIRE_NUMPY") == "1":
        raise

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "windowed.json")


def load_cases():
    with open(FIXTURE) as f:
        return json.load(f)["cases"]


@unittest.skipIf(np is None, "numpy is not installed")
class ExpandWindowsTest(unittest.TestCase):
    def setUp(self):
        from segpipe import windowed

        self.w = windowed
        self.cases = load_cases()

    def expand(self, c, out=None):
        wins = np.array(c["windows"], dtype=np.int32)
        offs = np.array(c["data_offsets"], dtype=np.int32)
        data = np.frombuffer(base64.b64decode(c["data"]), dtype=np.uint8)
        return self.w.expand_windows(wins, self.w.image_bytes(offs, data), c["hp"], c["wp"], out=out)

    def test_fixture_covers_the_edge_cases(self):
        names = {c["name"] for c in self.cases}
        for want in ("no instances", "sliced data column", "window outside the grid", "data one byte short"):
            self.assertIn(want, names)
        self.assertTrue(any(0 in c["windows"][2::4] for c in self.cases if not c.get("error")), "no empty mask")

    def test_matches_the_go_expander_byte_for_byte(self):
        for c in self.cases:
            if c.get("error"):
                continue
            with self.subTest(case=c["name"]):
                got = self.expand(c)
                n = len(c["windows"]) // 4
                self.assertEqual(got.shape, (n, c["hp"], c["wp"]))
                self.assertEqual(got.dtype, np.uint8)
                self.assertEqual(got.tobytes(), base64.b64decode(c.get("dense", "")))
                self.assertEqual(n, sum(c["boxes_per_image"]))

    def test_reused_output_is_cleared(self):
        for c in self.cases:
            if c.get("error") or not c["windows"]:
                continue
            with self.subTest(case=c["name"]):
                n = len(c["windows"]) // 4
                out = np.full(n * c["hp"] * c["wp"], 7, dtype=np.uint8)
                got = self.expand(c, out=out)
                self.assertEqual(got.tobytes(), base64.b64decode(c.get("dense", "")))

    def test_refuses_what_the_go_expander_refuses(self):
        for c in self.cases:
            if not c.get("error"):
                continue
            with self.subTest(case=c["name"]):
                out = np.full(len(c["windows"]) // 4 * c["hp"] * c["wp"], 7, dtype=np.uint8)
                with self.assertRaises(self.w.WindowError):
                    self.expand(c, out=out)
                self.assertTrue((out == 7).all(), "an error must leave out untouched")

    def test_refuses_bad_arguments(self):
        W = self.w.WindowError
        ok = np.array([0, 0, 1, 1], dtype=np.int32)
        one = np.ones(1, dtype=np.uint8)
        with self.assertRaises(W):
            self.w.expand_windows(ok.astype(np.int64), one, 4, 4)
        with self.assertRaises(W):
            self.w.expand_windows(ok[:3], one, 4, 4)
        with self.assertRaises(W):
            self.w.expand_windows(ok, one, 0, 4)
        with self.assertRaises(W):
            self.w.expand_windows(np.array([0, 0, -1, 1], dtype=np.int32), one, 4, 4)
        with self.assertRaises(W):
            self.w.expand_windows(ok, one, 4, 4, out=np.zeros(3, np.uint8))
        with self.assertRaises(W):
            self.w.expand_windows(np.zeros(0, np.int32), one, 4, 4)
        with self.assertRaises(W):
            self.w.image_bytes(np.array([0, 5], np.int32), one)
        with self.assertRaises(W):
            self.w.image_bytes(np.array([1, 0, 1], np.int32), one)

    def test_random_windows_against_a_per_row_reference(self):
        rng = np.random.default_rng(17)
        for _ in range(50):
            hp, wp = rng.integers(1, 24, size=2)
            n = int(rng.integers(0, 12))
            wins = []
            for _ in range(n):
                if rng.random() < 0.2:
                    wins.append((0, 0, 0, 0))
                    continue
                x0, y0 = rng.integers(0, wp), rng.integers(0, hp)
                wins.append((x0, y0, rng.integers(1, wp - x0 + 1), rng.integers(1, hp - y0 + 1)))
            wins = np.array(wins, dtype=np.int32).reshape(-1, 4)
            data = rng.integers(0, 2, size=int((wins[:, 2] * wins[:, 3]).sum()), dtype=np.uint8)
            want = np.zeros((n, hp, wp), np.uint8)
            off = 0
            for k, (x0, y0, w, h) in enumerate(wins):
                for r in range(h):
                    want[k, y0 + r, x0 : x0 + w] = data[off : off + w]
                    off += w
            np.testing.assert_array_equal(self.w.expand_windows(wins, data, int(hp), int(wp)), want)


if __name__ == "__main__":
    unittest.main()
