"""segpipe.Loader on a damaged shard set: every rank delivers exactly the
count len() promised (even batches), whatever is skipped, at world sizes 2
and 4 (ranks simulated in one process); errors are StreamError, not
pyarrow's OSError; a negative memory budget is refused.

Needs pyarrow, torch, a segpipe binary and the loader library."""

from __future__ import annotations

import os
import shutil
import unittest

import harness
from test_loader import _require_library


def damaged_set() -> str:
    """A copy of ``odd`` (129 images, two shards) with its second shard 0
    bytes long and the middle of its first overwritten (a bad row group)."""
    bad = os.path.join(harness.workdir(), "odd-uneven")
    if not os.path.exists(bad):
        shutil.copytree(os.path.join(harness.shard_root(), "odd"), bad)
        parts = sorted(p for p in os.listdir(bad) if p.endswith(".parquet"))
        assert len(parts) >= 2, parts
        open(os.path.join(bad, parts[-1]), "wb").close()
        first = os.path.join(bad, parts[0])
        with open(first, "r+b") as f:
            f.seek(os.path.getsize(first) // 2)
            f.write(b"\xff" * 4096)
    return bad


def count_rank(shards: str, rank: int, world: int, **kw) -> tuple[int, int, int, list]:
    """(len, batches delivered, padded, states) of one epoch of one rank."""
    from segpipe import Loader

    args = dict(batch_size=2, imgsz=64, seed=3, workers=2)
    args.update(kw)
    ld = Loader(shards, rank=rank, world_size=world, **args)
    n = len(ld)
    states = [b["state"].to_json() for b in ld]
    return n, len(states), ld.padded, states


class EvenBatchesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _require_library()
        cls.bad = damaged_set()

    def test_every_rank_delivers_its_promised_count(self):
        for world in (2, 4):
            with self.subTest(world=world):
                got = [count_rank(self.bad, r, world) for r in range(world)]
                lens = [g[0] for g in got]
                self.assertEqual(len(set(lens)), 1, f"len() differs by rank: {lens}")
                self.assertEqual([g[1] for g in got], lens, f"world {world}: delivered {[g[1] for g in got]}, promised {lens}")
                self.assertGreater(sum(g[2] for g in got), 0, "nothing was padded: the set is not damaged enough to test this")

    def test_padded_batches_carry_the_next_epoch(self):
        for r in range(4):
            n, got, padded, states = count_rank(self.bad, r, 4)
            for st in states[got - padded :]:
                self.assertEqual(st, {"seed": 3, "epoch": 1, "consumed": 0})

    def test_uneven_without_even_batches(self):
        # val (even_batches off) keeps every sample it can read: no padding
        for r in range(2):
            n, got, padded, _ = count_rank(self.bad, r, 2, val=True)
            self.assertEqual(padded, 0)
            self.assertLessEqual(got, n)

    def test_read_failure_and_close_raise_stream_error(self):
        from segpipe import Loader, StreamError

        ld = Loader(self.bad, batch_size=16, imgsz=64, workers=2, strict=True, rank=0, world_size=1)
        with self.assertRaises(StreamError) as cm:
            list(ld)
        self.assertNotIsInstance(cm.exception, OSError)
        with self.assertRaises(StreamError) as cm:
            list(ld.record_batches())
        self.assertIsNotNone(cm.exception.__cause__, "the pyarrow error is not chained")

        ok = Loader(os.path.join(harness.shard_root(), "synth"), batch_size=4, imgsz=64, workers=2, rank=0, world_size=1)
        r = ok.record_batches()
        r.read_next_batch()
        ok.close()
        with self.assertRaises(StreamError) as cm:
            while True:
                r.read_next_batch()
        self.assertIn("closed", str(cm.exception))

    def test_negative_max_memory_is_refused(self):
        from segpipe import Loader
        from segpipe.request import RequestError

        path = os.path.join(harness.shard_root(), "synth")
        for bad in (-5, -2, 0):
            with self.subTest(max_memory=bad), self.assertRaisesRegex(RequestError, f"max_memory {bad}"):
                Loader(path, max_memory=bad, rank=0, world_size=1)
        ld = Loader(path, max_memory=-1, batch_size=4, imgsz=64, limit=1, rank=0, world_size=1)
        self.assertEqual(len(list(ld)), 1)


if __name__ == "__main__":
    unittest.main()
