"""FlightBatches(transport="native"): the batch stream read through the
loader library's Go client instead of pyarrow's, against a real `segpipe
serve`. The same batches as `segpipe dump` and as the pyarrow transport,
the same states, and the faults of test_serve.py that the transport
handles itself: a server killed and restarted, a hung server, answers that
must not be retried, TLS. Needs the library (test_loader.py's rule)."""

from __future__ import annotations

import time
import unittest

import harness
from test_loader import _require_library
from test_serve import B, S, SEED, assert_same, killed_server_restarted, read_dump, stream


class NativeTransportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _require_library()
        harness.require("pyarrow.flight")
        cls.server = harness.shared_server()
        cls.ref = read_dump(harness.dump("synth", 16, batch=B, imgsz=S, seed=SEED), S)

    def test_two_epochs_equal_the_dump_and_the_pyarrow_transport(self):
        for masks in ("dense", "windowed"):
            with self.subTest(masks=masks):
                fb = stream(self.server, masks=masks, transport="native")
                py = stream(self.server, masks=masks)
                got, states, want_states = [], [], []
                for epoch in (0, 1):
                    n = len(fb)
                    batches = list(iter(fb))
                    self.assertEqual(len(batches), n)
                    got += batches
                    states += [b["state"] for b in batches]
                    want_states += [b["state"] for b in py]
                self.assertEqual(len(got), len(self.ref))
                for i, (g, w) in enumerate(zip(got, self.ref)):
                    assert_same(self, g, w, f"native {masks} batch {i}")
                self.assertEqual(states, want_states, "resume states differ from the pyarrow transport's")
                self.assertEqual(fb.state_dict(), {"seed": SEED, "epoch": 2, "consumed": 0})
                self.assertGreater(fb.bytes_received, 0)

    def test_state_dict_resumes_mid_epoch(self):
        fb = stream(self.server, transport="native", prefetch=1)
        it = iter(fb)
        for _ in range(3):
            next(it)
        saved = fb.state_dict()
        fb.close()
        again = stream(self.server, transport="native")
        again.load_state_dict(saved)
        rest = list(again)
        self.assertEqual(len(rest), 5)
        for i, g in enumerate(rest):
            assert_same(self, g, self.ref[3 + i], f"resumed batch {i}")

    def test_killed_server_restarted_resumes_identically(self):
        killed_server_restarted(self, self.ref, transport="native")

    def test_hung_server_times_out(self):
        from segpipe import StreamError

        with harness.Server() as srv:
            # 640 px: the library reads ahead, and an epoch of small
            # batches could all be in its buffers before the pause.
            fb = stream(srv, shards="odd", imgsz=640, transport="native", timeout=5.0, prefetch=1)
            it = iter(fb)
            next(it)
            srv.pause()  # SIGSTOP: the socket stays open, nothing answers
            try:
                t = time.monotonic()
                # The library's own error, naming its timeout, not the
                # consumer's backstop a moment later (timeout_grace).
                with self.assertRaisesRegex(StreamError, r"no batch from .* within 5s \(timeout\)"):
                    for _ in it:
                        pass
                self.assertLess(time.monotonic() - t, 20)
            finally:
                srv.resume()

    def test_stopped_server_fails_within_the_timeout(self):
        from segpipe import FlightBatches, StreamError

        addr = f"127.0.0.1:{harness.free_port()}"
        fb = FlightBatches(addr, "synth", rank=0, world_size=1, batch_size=B, imgsz=S, timeout=1.0, retries=1000,
                           backoff=0.05, max_backoff=0.2, transport="native")  # fmt: skip
        t = time.monotonic()
        # What was tried and why it failed, not "no batch in 1 s": the
        # library's retries end before a wait would pass the deadline.
        with self.assertRaisesRegex(StreamError, r"no answer from .* within 1s \(timeout\): \d+ attempts: .*connection refused"):
            for _ in fb:
                pass
        self.assertLess(time.monotonic() - t, 5.0)

    def test_answers_fail_at_once(self):
        from segpipe import StreamError

        with harness.Server("--token", "s3cret") as srv:
            ok = list(stream(srv, token="s3cret", limit=1, transport="native"))
            assert_same(self, ok[0], self.ref[0], "with the token")
            for token in ("wrong", None):
                t = time.monotonic()
                with self.assertRaisesRegex(StreamError, "(?i)unauthenticated|token"):
                    for _ in stream(srv, token=token, limit=1, backoff=1.0, transport="native"):
                        pass
                self.assertLess(time.monotonic() - t, 5, "an answer must not be retried")
        t = time.monotonic()
        with self.assertRaisesRegex(StreamError, "nosuch"):
            for _ in stream(self.server, shards="nosuch", limit=1, backoff=1.0, transport="native"):
                pass
        self.assertLess(time.monotonic() - t, 5)

    def test_tls_with_a_ca_file(self):
        cert, key = harness.self_signed_cert()
        with harness.Server("--tls-cert", cert, "--tls-key", key) as srv:
            got = list(stream(srv, tls=cert, limit=2, transport="native"))
        self.assertEqual(len(got), 2)
        for i, g in enumerate(got):
            assert_same(self, g, self.ref[i], f"TLS batch {i}")

    def test_environment_names_the_default(self):
        import os
        from unittest import mock

        with mock.patch.dict(os.environ, {"SEGPIPE_FLIGHT_TRANSPORT": "native"}):
            fb = stream(self.server, limit=1)
        self.assertEqual(fb.transport, "native")
        got = list(fb)
        assert_same(self, got[0], self.ref[0], "batch 0 through the default named by the environment")
        with mock.patch.dict(os.environ, {"SEGPIPE_FLIGHT_TRANSPORT": ""}):
            self.assertEqual(stream(self.server).transport, "pyarrow")

    def test_unknown_transport_is_refused(self):
        from segpipe.request import RequestError

        with self.assertRaisesRegex(RequestError, "transport 'grpc'"):
            stream(self.server, transport="grpc")


if __name__ == "__main__":
    unittest.main()
