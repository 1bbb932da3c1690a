"""Compressed streams: FlightBatches with compression="lz4" or "zstd" hands
out the tensors of `segpipe dump`, byte for byte, dense and windowed, and the
server counts fewer bytes per image on the wire than without compression.

Needs pyarrow, torch and a segpipe binary (harness.require)."""

from __future__ import annotations

import re
import unittest
import urllib.request

import harness
from test_serve import B, S, SEED, assert_same, read_dump, stream


def _sent(metrics: str, masks: str, comp: str) -> tuple[float, float]:
    """(bytes, images) the server counted for a mask transport and
    compression, from its Prometheus text."""
    out = []
    for name in ("segpipe_serve_transport_bytes_sent_total", "segpipe_serve_transport_images_sent_total"):
        m = re.search(rf'^{name}{{compression="{comp}",masks="{masks}"}} (\S+)$', metrics, re.M)
        out.append(float(m.group(1)) if m else 0.0)
    return out[0], out[1]


class CompressedStreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.require("numpy", "pyarrow", "pyarrow.flight", "torch")
        cls.port = harness.free_port()
        cls.server = harness.Server("--metrics-addr", f"127.0.0.1:{cls.port}").start()
        cls.ref = read_dump(harness.dump("synth", 8, batch=B, imgsz=S, seed=SEED), S)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return r.read().decode()

    def test_compressed_batches_equal_the_dump(self):
        for masks in ("dense", "windowed"):
            for comp in (None, "lz4", "zstd"):
                with self.subTest(masks=masks, compression=comp):
                    fb = stream(self.server, masks=masks, compression=comp)
                    got = list(fb)
                    fb.close()
                    self.assertEqual(len(got), len(self.ref))
                    for i, (g, w) in enumerate(zip(got, self.ref)):
                        assert_same(self, g, w, f"{masks}/{comp} batch {i}")
        text = self.metrics()
        for masks in ("dense", "windowed"):
            plain, images = _sent(text, masks, "none")
            self.assertEqual(images, B * len(self.ref), f"{masks}: images counted uncompressed")
            for comp in ("lz4", "zstd"):
                b, n = _sent(text, masks, comp)
                self.assertEqual(n, images, f"{masks}/{comp}: images counted")
                self.assertLess(b / n, plain / images, f"{masks}/{comp}: no fewer bytes an image than uncompressed")

    def test_bad_compression_fails_in_the_trainer(self):
        from segpipe.request import RequestError

        for bad in ("gzip", "none", "ZSTD", 1):
            with self.subTest(compression=bad), self.assertRaisesRegex(RequestError, "compression"):
                stream(self.server, compression=bad)


if __name__ == "__main__":
    unittest.main()
