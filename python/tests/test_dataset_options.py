"""Ultralytics' dataset options (classes, single_cls, fraction) through
segpipe.Loader and FlightBatches: the loader applies them, so both give the
same batches, len() counts the fraction's images, and every class left is
one kept.

Needs pyarrow, torch, a segpipe binary and the loader library."""

from __future__ import annotations

import unittest

import harness
from test_loader import _require_library

KW = dict(batch_size=8, imgsz=64, val=True)


def epoch(stream) -> tuple[int, list[int], int]:
    """(len, classes seen, images) of one epoch."""
    n = len(stream)
    classes: list[int] = []
    images = 0
    for b in stream:
        classes += b["classes"].flatten().tolist()
        images += b["images"].shape[0]
    return n, classes, images


class DatasetOptionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _require_library()
        cls.root = harness.shard_root()
        cls.server = harness.shared_server()

    def both(self, **opts):
        from segpipe import FlightBatches, Loader

        with Loader(f"{self.root}/synth", **KW, **opts) as ld:
            local = epoch(ld)
        fb = FlightBatches(self.server.addr, "synth", **KW, **opts)
        try:
            remote = epoch(fb)
        finally:
            fb.close()
        return local, remote

    def test_fraction_reads_a_prefix_and_len_counts_it(self):
        (n, _, images), remote = self.both(fraction=0.25)
        self.assertEqual(images, 16, "round(64 * 0.25) images")
        self.assertEqual(n, 2)
        self.assertEqual(remote, (n, remote[1], images))

    def test_classes_keep_only_those(self):
        (_, all_classes, _), _ = self.both()
        keep = sorted(set(all_classes))[:1]
        (_, local, _), (_, remote, _) = self.both(classes=keep)
        self.assertTrue(local, "some instances of the kept class")
        self.assertEqual(set(local), set(keep))
        self.assertEqual(local, remote)

    def test_single_cls_makes_every_class_zero(self):
        (_, all_classes, _), _ = self.both()
        (_, local, _), (_, remote, _) = self.both(single_cls=True)
        self.assertEqual(len(local), len(all_classes))
        self.assertEqual(set(local), {0})
        self.assertEqual(local, remote)


if __name__ == "__main__":
    unittest.main()
