"""FlightBatches against a real `segpipe serve` on loopback: every batch
byte-identical to `segpipe dump` of the same request, the PyTorch
conventions (epochs, len, state_dict, prefetch, DataLoader), and the faults a
trainer meets (a busy server, a wrong token, an unknown set, a server killed
and restarted, TLS, a hung server). The package's production classes run
unmodified; only the server is started by the test (harness.py).

Needs pyarrow, torch and a segpipe binary (harness.require)."""

from __future__ import annotations

import os
import threading
import time
import unittest
import warnings

import harness

try:
    import numpy as np
    import pyarrow as pa
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    np = pa = torch = None

B, S, SEED = 8, 128, 3  # 8 batches of 8 per epoch of the 64-image set


def read_dump(path: str, imgsz: int) -> list[dict]:
    """The dump's batches as the package's own conversion reads them."""
    from segpipe.batch import record_arrays

    with pa.ipc.open_stream(path) as r:
        return [record_arrays(rb, False, imgsz) for rb in r]


def assert_same(tc: unittest.TestCase, got: dict, want: dict, where: str) -> None:
    from segpipe.batch import TENSOR_KEYS

    for k in TENSOR_KEYS:
        g = got[k].cpu().numpy() if hasattr(got[k], "cpu") else got[k]
        w = want[k]
        tc.assertEqual((g.dtype, g.shape), (w.dtype, w.shape), f"{where}: {k}")
        tc.assertTrue(g.tobytes() == w.tobytes(), f"{where}: {k} differs from segpipe dump")


def stream(server, shards: str = "synth", **kw):
    from segpipe import FlightBatches

    args = dict(rank=0, world_size=1, batch_size=B, imgsz=S, start={"seed": SEED})
    args.update(kw)
    return FlightBatches(server.addr, shards, **args)


def killed_server_restarted(tc: unittest.TestCase, ref: list[dict], **kw) -> None:
    """Two epochs, windowed, with the server killed (-9) after two batches
    and restarted a second later: every batch equal to the dump's."""
    srv = harness.Server().start()
    try:
        fb = stream(srv, masks="windowed", retries=50, backoff=0.1, max_backoff=0.5, prefetch=1, **kw)
        it = iter(fb)
        got = [next(it), next(it)]
        srv.kill()  # kill -9 mid-stream
        threading.Timer(1.0, srv.start).start()
        got += list(it)
        got += list(fb)
    finally:
        time.sleep(0.1)
        srv.stop()
    tc.assertEqual(len(got), 16)
    for i, (g, w) in enumerate(zip(got, ref)):
        assert_same(tc, g, w, f"batch {i} across the restart")


class _Case(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.require("numpy", "pyarrow", "pyarrow.flight", "torch")
        cls.server = harness.shared_server()
        cls.ref = read_dump(harness.dump("synth", 16, batch=B, imgsz=S, seed=SEED), S)


class ByteIdentityTest(_Case):
    def test_two_epochs_dense_and_windowed_equal_the_dump(self):
        for masks in ("dense", "windowed"):
            with self.subTest(masks=masks):
                fb = stream(self.server, masks=masks)
                got = []
                for epoch in (0, 1):
                    self.assertEqual(fb.epoch, epoch)
                    n = len(fb)
                    batches = list(iter(fb))
                    self.assertEqual(len(batches), n, "len() must equal the batches an iteration yields")
                    self.assertEqual([b["batch"] for b in batches], list(range(n)))
                    got += batches
                self.assertEqual(len(got), len(self.ref))
                for i, (g, w) in enumerate(zip(got, self.ref)):
                    assert_same(self, g, w, f"{masks} batch {i}")
                self.assertEqual(fb.state_dict(), {"seed": SEED, "epoch": 2, "consumed": 0})
                self.assertGreater(fb.bytes_received, 0)

    def test_windowed_expanded_on_the_device_equals_the_dump(self):
        # The path a CUDA device takes (windows and bytes moved to the
        # device, expand_windows_torch there), run on the CPU by naming the
        # CPU as a device that expands; a GPU runs the same code.
        # With multi_scale each batch is cut to its own live canvas; the
        # dense stream of the same request is the reference there.
        for kw in ({}, {"multi_scale": 0.5}):
            with self.subTest(**kw):
                if kw:
                    dense = stream(self.server, epochs=2, **kw)
                    ref = [{k: v.numpy() for k, v in b.items() if hasattr(v, "numpy")} for _ in range(2) for b in dense]
                    self.assertGreater(len({r["images"].shape for r in ref}), 1, "multi_scale drew one size only")
                else:
                    ref = self.ref
                fb = stream(self.server, masks="windowed", device="cpu", epochs=2, **kw)
                fb.EXPAND_ON = ("cpu",)
                got = [b for _ in range(2) for b in fb]
                self.assertEqual(len(got), len(ref))
                for i, (g, w) in enumerate(zip(got, ref)):
                    self.assertNotIn("mask_windows", g)
                    assert_same(self, g, w, f"expanded on the device, batch {i}")

    def test_validation_stream_equals_dump_val(self):
        ref = read_dump(harness.dump("synth", 8, batch=B, imgsz=S, seed=SEED, val=True), S)
        got = list(stream(self.server, val=True))
        self.assertEqual(len(got), len(ref))
        for i, (g, w) in enumerate(zip(got, ref)):
            assert_same(self, g, w, f"val batch {i}")

    def test_record_arrays_equal_pyarrow_on_sliced_records(self):
        from segpipe.batch import record_arrays

        path = harness.dump("synth", 16, batch=B, imgsz=S, seed=SEED)
        with pa.ipc.open_stream(path) as r:
            rbs = list(r)
        checked = 0
        for rb in rbs[:4]:
            for off, n in ((0, rb.num_rows), (1, 3), (rb.num_rows - 2, 2), (3, 0)):
                sl = rb.slice(off, n)
                v = record_arrays(sl, False, S)
                rows = sl.to_pylist()
                self.assertEqual(v["image_id"].tolist(), [r["image_id"] for r in rows])
                self.assertEqual(v["orig_height"].tolist(), [r["orig_height"] for r in rows])
                self.assertEqual(v["transform"].tolist(), [r["transform"] for r in rows])
                self.assertEqual(v["boxes_per_image"].tolist(), [r["boxes_per_image"] for r in rows])
                self.assertEqual(v["boxes"].tolist(), [list(b) for r in rows for b in _boxes(r["boxes"])])
                self.assertEqual(v["classes"].tolist(), [c for r in rows for c in r["classes"]])
                self.assertEqual(v["iscrowd"].tolist(), [c for r in rows for c in r["iscrowd"]])
                img = np.array([r["image"] for r in rows], np.uint8).reshape(v["images"].shape)
                self.assertTrue(np.array_equal(v["images"], img))
                masks = [m for r in rows for m in r["masks"]]
                self.assertEqual([m.ravel().tolist() for m in v["masks"]], [list(m) for m in masks])
                self.assertEqual(v["offsets"].tolist(), np.concatenate(([0], np.cumsum(v["boxes_per_image"]))).tolist())
                checked += 1
        self.assertEqual(checked, 16)


def _boxes(b):
    # a list of 4-float lists, or of fixed_size_list rows, as pyarrow gives them
    return [list(x) for x in b]


class DatasetInfoTest(_Case):
    def test_dataset_info(self):
        import json

        fb = stream(self.server)
        info = fb.dataset_info()
        self.assertEqual(info["images"], 64)
        with open(os.path.join(harness.shard_root(), "synth", "manifest.json")) as f:
            cats = json.load(f)["categories"]
        self.assertEqual([c["name"] for c in info["categories"]], [c["name"] for c in cats])
        self.assertEqual(fb.images(), 64)


class ConventionsTest(_Case):
    def test_state_dict_resumes_bit_identically(self):
        fb = stream(self.server, masks="windowed")
        k = 3
        for i, b in enumerate(fb):
            if i == k:
                break
        saved = fb.state_dict()
        self.assertEqual(saved, b["state"].to_json())
        self.assertEqual(saved["epoch"], 0)
        fresh = stream(self.server, masks="windowed")
        fresh.load_state_dict(saved)
        self.assertEqual(len(fresh), 8 - k - 1)
        rest = list(fresh) + list(fresh)  # the rest of epoch 0, then epoch 1
        self.assertEqual(len(rest), 16 - k - 1)
        for j, g in enumerate(rest):
            assert_same(self, g, self.ref[k + 1 + j], f"resumed batch {k + 1 + j}")
        # set_epoch keeps a loaded mid-epoch state of that very epoch, and
        # starts another epoch from its beginning.
        again = stream(self.server)
        again.load_state_dict(saved)
        again.set_epoch(0)
        self.assertEqual(again.state_dict(), saved)
        again.set_epoch(1)
        self.assertEqual(again.state_dict(), {"seed": SEED, "epoch": 1, "consumed": 0})
        first = next(iter(again))
        assert_same(self, first, self.ref[8], "set_epoch(1) batch 0")

    def test_prefetch_thread_reads_ahead_and_ends_with_the_pass(self):
        fb = stream(self.server, masks="windowed", prefetch=3)
        it = iter(fb)
        first = next(it)
        names = [t.name for t in threading.enumerate()]
        self.assertIn("segpipe-prefetch", names)
        # the reader thread fills the queue while the consumer holds the batch
        deadline = time.monotonic() + 20
        while fb.delivered == 1 and time.monotonic() < deadline:
            gen_q = it.gi_frame.f_locals["pr"].queue if it.gi_frame else None
            if gen_q is not None and gen_q.qsize() == 3:
                break
            time.sleep(0.02)
        self.assertEqual(it.gi_frame.f_locals["pr"].queue.qsize(), 3, "prefetch=3 batches should wait ready")
        assert_same(self, first, self.ref[0], "batch 0")
        it.close()  # a consumer leaving mid-epoch
        deadline = time.monotonic() + 10
        while "segpipe-prefetch" in [t.name for t in threading.enumerate()] and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertNotIn("segpipe-prefetch", [t.name for t in threading.enumerate()])
        self.assertEqual(fb.state_dict(), first["state"].to_json(), "the state is the last batch handed out")

    def test_dataloader_workers_0_and_1(self):
        import multiprocessing

        from torch.utils.data import DataLoader

        for workers in (0, 1):
            with self.subTest(num_workers=workers):
                fb = stream(self.server, limit=3)
                kw = {"multiprocessing_context": multiprocessing.get_context("spawn")} if workers else {}
                dl = DataLoader(fb, batch_size=None, num_workers=workers, **kw)
                got = list(dl)
                self.assertEqual(len(got), 3)
                for i, g in enumerate(got):
                    assert_same(self, g, self.ref[i], f"workers={workers} batch {i}")
                if workers:
                    # the worker iterated a copy: set_epoch picks the next epoch
                    fb.set_epoch(1)
                    got = list(dl)
                    assert_same(self, got[0], self.ref[8], "workers=1 epoch 1 batch 0")

    def test_dataloader_refuses_two_workers(self):
        from torch.utils.data import DataLoader

        dl = DataLoader(stream(self.server, limit=1), batch_size=None, num_workers=2)
        with self.assertRaisesRegex(RuntimeError, "num_workers"):
            list(dl)

    def test_pin_memory(self):
        from torch.utils.data import DataLoader

        if torch.cuda.is_available():
            b = next(iter(stream(self.server, limit=1, pin_memory=True)))
            self.assertTrue(b["images"].is_pinned())
            assert_same(self, b, self.ref[0], "pinned batch 0")
        else:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                fb = stream(self.server, limit=1, pin_memory=True)
            self.assertTrue(any("pin_memory" in str(x.message) for x in w), "no warning that nothing is pinned")
            self.assertFalse(fb.pin_memory)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DataLoader warns when it has no accelerator to pin for
            got = list(DataLoader(stream(self.server, limit=2), batch_size=None, pin_memory=True))
        for i, g in enumerate(got):
            assert_same(self, g, self.ref[i], f"DataLoader(pin_memory=True) batch {i}")

    def test_epochs_and_close_mosaic(self):
        from segpipe import StreamError

        fb = stream(self.server, epochs=2, close_mosaic=1)
        list(fb)
        last = list(fb)  # epoch 1 is the schedule's last: no mosaic
        ref = read_dump(harness.dump("synth", 8, batch=B, imgsz=S, seed=SEED, epoch=1, mosaic=0), S)
        self.assertEqual(len(last), len(ref))
        for i, (g, w) in enumerate(zip(last, ref)):
            assert_same(self, g, w, f"close_mosaic epoch 1 batch {i}")
        with self.assertRaisesRegex(StreamError, "past the 2 epochs"):
            list(fb)


class RanksTest(_Case):
    def test_even_batches_over_uneven_ranks(self):
        from segpipe.request import rank_batches

        # 129 images, batch 16, 8 ranks: rank 0 has 17 samples, the others 16
        self.assertEqual([rank_batches(129, 16, r, 8) for r in range(8)], [2, 1, 1, 1, 1, 1, 1, 1])
        ids = []
        for r in range(8):
            fb = stream(self.server, shards="odd", batch_size=16, imgsz=64, rank=r, world_size=8)
            self.assertEqual(len(fb), 1)
            got = list(fb)
            self.assertEqual(len(got), 1, f"rank {r}")
            self.assertEqual(fb.state_dict()["epoch"], 1, "a whole pass moves to the next epoch")
            ids.append(set(got[0]["image_id"].tolist()))
        allids = set().union(*ids)
        self.assertEqual(sum(len(s) for s in ids), len(allids), "ranks overlap")
        self.assertEqual(len(allids), 128, "all but the one sample rank 0 had over the others")
        uneven = stream(self.server, shards="odd", batch_size=16, imgsz=64, rank=0, world_size=8, even_batches=False)
        self.assertEqual((len(uneven), len(list(uneven))), (2, 2))


class FaultsTest(_Case):
    def test_busy_server_backs_off_and_succeeds(self):
        from segpipe.flight import transport_failure

        with harness.Server("--max-streams", "1") as srv:
            # 640 px batches are too large for gRPC's flow-control window:
            # the server cannot finish stream a before its reader does.
            a = stream(srv, shards="odd", imgsz=640, prefetch=1)
            it = iter(a)
            next(it)  # stream a holds the only slot
            got, errs = [], []
            b = stream(srv, limit=2, backoff=0.05, max_backoff=0.2, retries=100)

            def read_b():
                try:
                    got.extend(b)
                except Exception as e:  # reported below
                    errs.append(e)

            t = threading.Thread(target=read_b)
            t.start()
            time.sleep(1.0)
            self.assertEqual(got, [], "the second stream ran beside the first on --max-streams 1")
            rest = list(it)  # a ends, its slot frees
            t.join(60)
            self.assertFalse(errs, errs)
            self.assertEqual(len(got), 2)
            for i, g in enumerate(got):
                assert_same(self, g, self.ref[i], f"second stream batch {i}")
            self.assertEqual(len(rest), 16)
            # the refusal as pyarrow raises it is what transport_failure retries
            c = stream(srv, limit=1, retries=0)
            hold = iter(stream(srv, shards="odd", imgsz=640, prefetch=1))
            next(hold)
            from segpipe import StreamError

            with self.assertRaises(StreamError) as cm:
                list(c)
            cause = cm.exception.__cause__
            self.assertIn("resource exhausted", str(cm.exception))
            self.assertTrue(transport_failure(cause), repr(cause))
            hold.close()

    def test_answers_fail_at_once(self):
        from segpipe import StreamError

        with harness.Server("--token", "s3cret") as srv:
            ok = list(stream(srv, token="s3cret", limit=1))
            assert_same(self, ok[0], self.ref[0], "with the token")
            for token in ("wrong", None):
                t = time.monotonic()
                with self.assertRaisesRegex(StreamError, "(?i)unauthenticated|token"):
                    list(stream(srv, token=token, limit=1, backoff=1.0))
                self.assertLess(time.monotonic() - t, 5, "an answer must not be retried")
        t = time.monotonic()
        with self.assertRaisesRegex(StreamError, "nosuch"):
            list(stream(self.server, shards="nosuch", limit=1, backoff=1.0))
        self.assertLess(time.monotonic() - t, 5)

    def test_killed_server_restarted_resumes_identically(self):
        killed_server_restarted(self, self.ref)

    def test_tls_with_a_ca_file(self):
        cert, key = harness.self_signed_cert()
        with harness.Server("--tls-cert", cert, "--tls-key", key) as srv:
            got = list(stream(srv, tls=cert, limit=2))
            self.assertEqual(stream(srv, tls=cert).dataset_info()["images"], 64)
        self.assertEqual(len(got), 2)
        for i, g in enumerate(got):
            assert_same(self, g, self.ref[i], f"TLS batch {i}")

    def test_hung_server_times_out(self):
        from segpipe import StreamError

        with harness.Server() as srv:
            fb = stream(srv, timeout=2.0, prefetch=1)
            it = iter(fb)
            next(it)
            srv.pause()  # SIGSTOP: the socket stays open, nothing answers
            try:
                t = time.monotonic()
                with self.assertRaisesRegex(StreamError, "no batch from .* in 2 s"):
                    for _ in it:
                        pass
                self.assertLess(time.monotonic() - t, 10)
                t = time.monotonic()
                with self.assertRaises(StreamError):
                    stream(srv, timeout=2.0, shards="odd").dataset_info()
                self.assertLess(time.monotonic() - t, 10)
            finally:
                srv.resume()

    def test_stopped_server_fails_within_the_timeout(self):
        # Nothing listens on the port: every connection is refused at once,
        # and retries that would outlast timeout= are not made. The time is
        # held loosely (3x): the exact deadline is test_stream's, with a clock.
        import pyarrow.flight as flight

        from segpipe import FlightBatches, StreamError

        addr = f"127.0.0.1:{harness.free_port()}"
        fb = FlightBatches(addr, "synth", rank=0, world_size=1, batch_size=B, imgsz=S, timeout=1.0, retries=1000, backoff=0.05, max_backoff=0.2)
        t = time.monotonic()
        with self.assertRaisesRegex(StreamError, "attempts failed within the 1 s timeout") as cm:
            for _ in fb:  # not list(): that asks len() first
                pass
        self.assertLess(time.monotonic() - t, 3.0)
        self.assertIsInstance(cm.exception.__cause__, flight.FlightUnavailableError)
        with self.assertRaisesRegex(StreamError, "flight info"):
            len(fb)

    def test_hung_server_before_the_first_batch_fails_within_the_timeout(self):
        # SIGSTOP before any connection: gRPC's own connect limit is 20 s,
        # and a DoGet waits for its schema with no limit at all.
        from segpipe import StreamError

        with harness.Server() as srv:
            srv.pause()
            try:
                fb = stream(srv, timeout=2.0)
                t = time.monotonic()
                with self.assertRaisesRegex(StreamError, r"(in|within) 2 s"):
                    for _ in fb:
                        pass
                self.assertLess(time.monotonic() - t, 6.0)
            finally:
                srv.resume()

    def test_read_failures_raise_stream_error(self):
        import pyarrow as pa

        from segpipe import StreamError

        srv = harness.Server().start()
        try:
            fb = stream(srv, retries=0, prefetch=1)
            it = iter(fb)
            next(it)
            srv.kill()
            with self.assertRaises(Exception) as cm:
                for _ in it:
                    pass
        finally:
            srv.stop()
        e = cm.exception
        self.assertIsInstance(e, StreamError, repr(e))
        self.assertNotIsInstance(e, (OSError, pa.ArrowException))
        self.assertIsInstance(e.__cause__, pa.ArrowException, "the transport's error is kept as the cause")

    def test_closed_stream_raises_stream_error(self):
        from segpipe import StreamError

        fb = stream(self.server)
        fb.close()
        with self.assertRaisesRegex(StreamError, "closed"):
            for _ in fb:
                pass
        # closed during a pass: an error, not a short pass taken for whole
        fb = stream(self.server, prefetch=1)
        it = iter(fb)
        first = next(it)
        fb.close()
        with self.assertRaisesRegex(StreamError, "closed"):
            for _ in it:
                pass
        self.assertEqual(fb.epoch, 0, "a pass cut by close() must not move to the next epoch")
        assert_same(self, first, self.ref[0], "batch 0")
        with self.assertRaisesRegex(StreamError, "closed"):
            iter(fb)


if __name__ == "__main__":
    unittest.main()
