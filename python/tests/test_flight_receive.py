"""The receiving side's fast paths against their simple versions: the torch
mask expander (for a device) against the numpy one and raster.Expand's
fixture, and the allocator setting FlightBatches makes when it connects."""

import base64
import json
import os
import subprocess
import sys
import unittest

import _path  # noqa: F401

try:
    import numpy as np
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    np = torch = None

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "windowed.json")


def random_windows(rng, n, hp, wp):
    """n windows inside an hp x wp grid (some empty) and their random bytes."""
    wins = []
    for _ in range(n):
        if rng.random() < 0.1:
            wins.append((0, 0, 0, 0))
            continue
        w, h = int(rng.integers(1, wp + 1)), int(rng.integers(1, hp + 1))
        wins.append((int(rng.integers(0, wp - w + 1)), int(rng.integers(0, hp - h + 1)), w, h))
    wins = np.array(wins, dtype=np.int32).reshape(-1, 4)
    size = int((wins[:, 2].astype(np.int64) * wins[:, 3]).sum())
    return wins, rng.integers(0, 2, size=size, dtype=np.uint8)


@unittest.skipIf(torch is None, "numpy and torch are needed")
class ExpandWindowsTorchTest(unittest.TestCase):
    def setUp(self):
        from segpipe import windowed

        self.w = windowed

    def devices(self):
        out = ["cpu"]
        if torch.cuda.is_available():
            out.append("cuda")
        return out

    def test_matches_the_numpy_expander_on_random_windows(self):
        rng = np.random.default_rng(5)
        for dev in self.devices():
            for n, hp, wp in ((0, 4, 4), (1, 1, 1), (7, 5, 9), (300, 160, 160)):
                with self.subTest(device=dev, n=n, grid=(hp, wp)):
                    wins, data = random_windows(rng, n, hp, wp)
                    want = self.w.expand_windows(wins, data, hp, wp)
                    got = self.w.expand_windows_torch(torch.from_numpy(wins), torch.from_numpy(data).to(dev), hp, wp)
                    self.assertEqual(got.device.type, dev)
                    self.assertEqual(tuple(got.shape), (n, hp, wp))
                    self.assertTrue(np.array_equal(got.cpu().numpy(), want))

    def test_matches_the_go_expander_byte_for_byte(self):
        with open(FIXTURE) as f:
            cases = json.load(f)["cases"]
        done = 0
        for c in cases:
            if c.get("error"):
                continue
            wins = np.array(c["windows"], dtype=np.int32)
            offs = np.array(c["data_offsets"], dtype=np.int32)
            data = self.w.image_bytes(offs, np.frombuffer(base64.b64decode(c["data"]), dtype=np.uint8))
            got = self.w.expand_windows_torch(wins, torch.from_numpy(data.copy()), c["hp"], c["wp"])
            self.assertEqual(got.numpy().tobytes(), base64.b64decode(c.get("dense", "")), c["name"])
            done += 1
        self.assertGreater(done, 0, "fixture has no valid case")

    def test_refuses_what_the_numpy_expander_refuses(self):
        data = torch.zeros(6, dtype=torch.uint8)
        for name, wins, size in (
            ("outside the grid", [[3, 0, 2, 3]], 6),
            ("negative origin", [[-1, 0, 2, 3]], 6),
            ("too few bytes", [[0, 0, 2, 3]], 5),
            ("too many bytes", [[0, 0, 2, 2]], 6),
        ):
            with self.subTest(name):
                w = np.array(wins, dtype=np.int32)
                with self.assertRaises(self.w.WindowError):
                    self.w.expand_windows(w, np.zeros(size, np.uint8), 4, 4)
                with self.assertRaises(self.w.WindowError):
                    self.w.expand_windows_torch(w, data[:size], 4, 4)
                with self.assertRaises(self.w.WindowError):
                    self.w.check_windows(w, size, 4, 4)
        with self.assertRaises(self.w.WindowError):
            self.w.expand_windows_torch(np.zeros((1, 4), np.int32), torch.zeros(0, dtype=torch.int32), 4, 4)


class KeepReceiveMemoryTest(unittest.TestCase):
    def run_child(self, env_value):
        code = "from segpipe.flight import keep_receive_memory as k; print(k(), k())"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        env.pop("SEGPIPE_MALLOC_KEEP", None)
        if env_value is not None:
            env["SEGPIPE_MALLOC_KEEP"] = env_value
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        if p.returncode != 0 and "No module named" in p.stderr:
            self.skipTest(p.stderr.strip().splitlines()[-1])
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.split()

    def test_applies_once_on_glibc_and_not_when_opted_out(self):
        import platform

        glibc = platform.libc_ver()[0] == "glibc"
        self.assertEqual(self.run_child(None), [str(glibc)] * 2)
        self.assertEqual(self.run_child("0"), ["False", "False"])


if __name__ == "__main__":
    unittest.main()
