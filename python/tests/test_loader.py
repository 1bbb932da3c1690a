"""segpipe.Loader, the loader library in this process: every batch
byte-identical to `segpipe dump`, resume, the Arrow reader, bad input that
must not crash the interpreter, fork safety, and memory over 2,000 batches.

Needs pyarrow, torch, a segpipe binary (for dump and the test shards) and
the loader library (installed with the package, or SEGPIPE_LIBRARY)."""

from __future__ import annotations

import os
import shutil
import unittest

import harness
from test_serve import B, S, SEED, assert_same, read_dump


def _require_library():
    harness.require("numpy", "pyarrow", "torch")
    from segpipe import loader

    if not os.path.exists(loader.library_path()):
        why = f"no loader library at {loader.library_path()} (pip install ./python, or set SEGPIPE_LIBRARY)"
        if harness.REQUIRED:
            raise AssertionError(why)
        raise unittest.SkipTest(why)


def make(shards: str = "synth", **kw):
    from segpipe import Loader

    args = dict(rank=0, world_size=1, batch_size=B, imgsz=S, seed=SEED, workers=2)
    args.update(kw)
    path = shards if os.path.isabs(shards) else os.path.join(harness.shard_root(), shards)
    return Loader(path, **args)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class LoaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _require_library()
        cls.ref = read_dump(harness.dump("synth", 16, batch=B, imgsz=S, seed=SEED), S)

    def test_two_epochs_dense_and_windowed_equal_the_dump(self):
        for masks in ("dense", "windowed"):
            with self.subTest(masks=masks):
                ld = make(masks=masks)
                got = []
                for _ in range(2):
                    n = len(ld)
                    batches = list(ld)
                    self.assertEqual(len(batches), n)
                    got += batches
                self.assertEqual(len(got), 16)
                for i, (g, w) in enumerate(zip(got, self.ref)):
                    assert_same(self, g, w, f"{masks} batch {i}")
                self.assertEqual(ld.state_dict(), {"seed": SEED, "epoch": 2, "consumed": 0})

    def test_next_epoch_starts_ahead_unless_another_is_asked_for(self):
        ld = make(epochs=3)
        first = list(ld)
        # Epoch 1's loader started while epoch 0's last batches were taken.
        self.assertIsNotNone(ld._ahead)
        self.assertEqual(ld._ahead.request.start.to_json(), {"seed": SEED, "epoch": 1, "consumed": 0})
        ld.set_epoch(0)  # epoch 0 again: the pass started ahead is dropped
        again = list(ld)
        self.assertEqual(len(again), len(first))
        for i, (g, h) in enumerate(zip(first, again)):
            assert_same(self, g, self.ref[i], f"epoch 0 batch {i}")
            assert_same(self, h, self.ref[i], f"epoch 0 again, batch {i}")
        second = list(ld)  # from the pass started ahead
        for i, g in enumerate(second):
            assert_same(self, g, self.ref[len(first) + i], f"epoch 1 batch {i}")
        list(ld)
        self.assertIsNone(ld._ahead, "a pass was started past the last epoch")
        ld.close()

    def test_state_dict_resumes_bit_identically(self):
        ld = make(masks="windowed")
        k = 4
        for i, b in enumerate(ld):
            if i == k:
                break
        saved = ld.state_dict()
        self.assertEqual(saved, b["state"].to_json())
        fresh = make(masks="windowed")
        fresh.load_state_dict(saved)
        rest = list(fresh) + list(fresh)
        self.assertEqual(len(rest), 16 - k - 1)
        for j, g in enumerate(rest):
            assert_same(self, g, self.ref[k + 1 + j], f"resumed batch {k + 1 + j}")

    def test_record_batches_is_an_arrow_reader(self):
        import pyarrow as pa

        from segpipe.batch import record_arrays

        ld = make()
        r = ld.record_batches()
        self.assertIsInstance(r, pa.RecordBatchReader)
        rbs = list(r)
        self.assertEqual(len(rbs), 8)
        for i, rb in enumerate(rbs):
            got = record_arrays(rb, False, S)
            for k, v in got.items():
                self.assertTrue(v.tobytes() == self.ref[i][k].tobytes(), f"record {i} {k}")
        self.assertEqual(ld.state_dict(), {"seed": SEED, "epoch": 1, "consumed": 0})

    def test_bad_input_is_an_error_not_a_crash(self):
        from segpipe import Loader, StreamError

        with self.assertRaisesRegex(StreamError, "nosuch"):
            list(make(os.path.join(harness.workdir(), "nosuch")))
        with self.assertRaisesRegex(Exception, "imgsz"):
            make(imgsz=30)
        # a budget the request cannot fit: refused with the figures
        with self.assertRaisesRegex(StreamError, "(?i)memory"):
            list(make(imgsz=640, batch_size=64, max_memory=64 << 20, limit=1))
        self.assertIsInstance(make(), Loader)

    def test_damaged_shard_is_skipped_and_counted(self):
        src = os.path.join(harness.shard_root(), "odd")
        bad = os.path.join(harness.workdir(), "odd-damaged")
        if not os.path.exists(bad):
            shutil.copytree(src, bad)
            part = sorted(p for p in os.listdir(bad) if p.endswith(".parquet"))[0]
            with open(os.path.join(bad, part), "r+b") as f:
                f.seek(os.path.getsize(os.path.join(bad, part)) // 2)
                f.write(b"\xff" * 4096)  # damage the middle of the first shard
        ld = make(bad, batch_size=16, imgsz=64)
        n = sum(b["images"].shape[0] for b in ld)
        self.assertGreater(sum(ld.skipped.values()), 0, "nothing was counted as skipped")
        self.assertTrue(0 < n < 129, f"{n} images of 129 delivered from a set with a damaged shard")

    def test_keyboard_interrupt_mid_epoch(self):
        ld = make()
        held = []
        with self.assertRaises(KeyboardInterrupt):
            for i, b in enumerate(ld):
                held.append(b)
                if i == 2:
                    raise KeyboardInterrupt
        ld.close()
        again = list(ld)  # the rest of the epoch, after the last batch handed out
        self.assertEqual(len(again), 8 - 3)
        assert_same(self, again[0], self.ref[3], "after the interrupt")
        for i, b in enumerate(held):  # batches held across the stop stay valid
            assert_same(self, b, self.ref[i], f"held batch {i}")

    def test_forked_child_is_refused(self):
        list(make(limit=1))  # the Go runtime runs in this process now
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: must get a clear error, never a hang or crash
            os.close(r)
            try:
                list(make(limit=1))
                msg = b"no error"
            except RuntimeError as e:
                msg = str(e).encode()
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                msg = repr(e).encode()
            os.write(w, msg)
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            msg = f.read().decode()
        os.waitpid(pid, 0)
        self.assertIn("num_workers=0", msg)

    def test_2000_batches_memory_flat(self):
        ld = make(batch_size=4, imgsz=64, masks="windowed")
        n, warm, samples = 0, None, []
        while n < 2000:
            for b in ld:
                n += 1
                if n == 200:
                    warm = rss_bytes()
                if n % 200 == 0:
                    samples.append(rss_bytes())
                if n == 2000:
                    break
        growth = max(samples) - warm
        print(f"\nLoader: 2,000 batches, RSS after 200 {warm / 2**20:.1f} MiB, max after {max(samples) / 2**20:.1f} MiB")
        self.assertLess(growth, 48 << 20, f"RSS grew {growth / 2**20:.1f} MiB after warm-up: {samples}")


if __name__ == "__main__":
    unittest.main()
