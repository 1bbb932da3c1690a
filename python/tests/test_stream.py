"""The resumable read loop with scripted readers: reconnect from the last
state, limits, backoff, and what ends a stream at once."""

import json
import pickle
import unittest

import _path  # noqa: F401
from segpipe.request import Request, ResumeState
from segpipe.stream import Resumable, StreamError


class Lost(Exception):
    """Stands for a transport failure (pyarrow's FlightUnavailableError)."""


class Refused(Exception):
    """Stands for an answer (pyarrow's ArrowInvalid)."""


def chunk(consumed, batch, epoch=0):
    return {"meta": json.dumps({"seed": 1, "epoch": epoch, "consumed": consumed, "batch": batch}).encode()}


class Reader:
    def __init__(self, events):
        self.events = list(events)
        self.cancelled = False

    def read_chunk(self):
        if not self.events:
            raise StopIteration
        e = self.events.pop(0)
        if isinstance(e, Exception):
            raise e
        return e

    def cancel(self):
        self.cancelled = True


class Server:
    """Hands out scripted readers (or raises) and records every request."""

    def __init__(self, *scripts):
        self.scripts = list(scripts)
        self.requests = []
        self.readers = []
        self.timeouts = []

    def open(self, req, timeout=None):
        self.timeouts.append(timeout)
        self.requests.append(req)
        s = self.scripts.pop(0)
        if isinstance(s, Exception):
            raise s
        r = Reader(s)
        self.readers.append(r)
        return r


def meta(c):
    return c["meta"]


def stream(server, req=None, **kw):
    slept = []
    kw.setdefault("retries", 3)
    s = Resumable(
        req or Request(shards="s", start=ResumeState(seed=1), batch_size=4),
        server.open,
        meta,
        retryable=(Lost,),
        failures=(Refused,),
        backoff=0.1,
        max_backoff=0.25,
        sleep=slept.append,
        **kw,
    )
    return s, slept


def drain(s):
    out = []
    while True:
        try:
            c = s.next()
        except StopIteration:
            return out
        out.append((c, s.commit()))


class ResumableTest(unittest.TestCase):
    def test_reads_to_the_end_with_each_state(self):
        srv = Server([chunk(4, 0), chunk(8, 1), chunk(0, 2, epoch=1)])
        s, _ = stream(srv)
        got = drain(s)
        self.assertEqual([st for _, st in got], [ResumeState(1, 0, 4), ResumeState(1, 0, 8), ResumeState(1, 1, 0)])
        self.assertEqual((s.delivered, s.state, s.done), (3, ResumeState(1, 1, 0), True))
        self.assertEqual(len(srv.requests), 1)
        with self.assertRaises(StopIteration):
            s.next()  # stays finished, never reopens

    def test_reconnects_from_the_last_state_with_the_limit_reduced(self):
        srv = Server([chunk(4, 0), chunk(8, 1), Lost("reset")], [chunk(12, 0), chunk(16, 1)])
        s, slept = stream(srv, Request(shards="s", start=ResumeState(seed=1), batch_size=4, limit=4))
        got = drain(s)
        self.assertEqual([st.consumed for _, st in got], [4, 8, 12, 16])
        again = srv.requests[1]
        self.assertEqual((again.start, again.limit, again.batch_size), (ResumeState(1, 0, 8), 2, 4))
        self.assertEqual(slept, [0.1])
        self.assertTrue(srv.readers[0].cancelled)

    def test_a_reached_limit_is_never_reopened(self):
        srv = Server([chunk(4, 0), chunk(8, 1), Lost("late")])
        s, _ = stream(srv, Request(shards="s", batch_size=4, limit=2))
        self.assertEqual(len(drain(s)), 2)
        self.assertEqual(len(srv.requests), 1)
        self.assertTrue(srv.readers[0].cancelled, "the server's loader must be stopped")

    def test_a_drop_after_the_last_epoch_is_not_reopened(self):
        srv = Server([chunk(4, 0), chunk(0, 1, epoch=1), Lost("after the last batch")])
        s, slept = stream(srv, Request(shards="s", start=ResumeState(seed=1), batch_size=4, epochs=1))
        got = drain(s)
        self.assertEqual([st for _, st in got], [ResumeState(1, 0, 4), ResumeState(1, 1, 0)])
        self.assertEqual((len(srv.requests), slept, s.done), (1, [], True))

    def test_gives_up_after_retries_in_a_row_with_backoff(self):
        srv = Server([chunk(4, 0), Lost("a")], Lost("b"), Lost("c"), Lost("d"), [chunk(8, 1)])
        s, slept = stream(srv)
        s.next()
        s.commit()
        with self.assertRaises(StreamError) as cm:
            s.next()
        self.assertIn("lost after 1 batches; 3 reconnect attempts failed, last: d", str(cm.exception))
        self.assertEqual(slept, [0.1, 0.2, 0.25])
        self.assertTrue(all(r.start == ResumeState(1, 0, 4) for r in srv.requests[1:]))

    def test_retries_count_in_a_row_only(self):
        srv = Server([chunk(4, 0), Lost("a")], Lost("b"), [chunk(8, 1), Lost("c")], Lost("d"), [chunk(12, 2)])
        s, _ = stream(srv, retries=2)
        self.assertEqual([st.consumed for _, st in drain(s)], [4, 8, 12])

    def test_an_answer_ends_the_stream_at_once(self):
        for script in (Refused("bad request"), [chunk(4, 0), Refused("no such shard set")]):
            srv = Server(script, [chunk(99, 0)])
            s, slept = stream(srv)
            with self.assertRaises(StreamError) as cm:
                drain(s)
            self.assertIn("stream from the server after", str(cm.exception))
            self.assertEqual((slept, s.done), ([], True))
            self.assertEqual(len(srv.requests), 1)

    def test_a_batch_without_resume_state_ends_the_stream(self):
        srv = Server([chunk(4, 0), {"meta": b'{"seed":1}'}])
        s, _ = stream(srv)
        s.next()
        s.commit()
        with self.assertRaises(StreamError) as cm:
            s.next()
        self.assertIn("batch 1", str(cm.exception))
        self.assertTrue(s.done and srv.readers[0].cancelled)
        self.assertEqual(s.state, ResumeState(1, 0, 4))

    def test_a_batch_that_cannot_be_delivered_keeps_the_previous_state(self):
        srv = Server([chunk(4, 0), chunk(8, 1)])
        s, _ = stream(srv)
        s.next()
        s.commit()
        s.next()
        err = s.fail(ValueError("masks outside the grid"))
        self.assertIn("batch 1: masks outside the grid", str(err))
        self.assertEqual((s.state.consumed, s.delivered, s.done), (4, 1, True))

    def test_commit_protocol(self):
        s, _ = stream(Server([chunk(4, 0), chunk(8, 1)]))
        with self.assertRaises(RuntimeError):
            s.commit()
        s.next()
        with self.assertRaises(RuntimeError):
            s.next()

    def test_a_read_cut_by_close_ends_the_stream_without_an_error(self):
        srv = Server([chunk(4, 0), Lost("cancelled")])
        s, slept = stream(srv)
        s.next()
        s.commit()
        r = srv.readers[0]
        read = r.read_chunk

        def closed_meanwhile():
            s.close()  # as another thread's close() does, its cancel failing this read
            return read()

        r.read_chunk = closed_meanwhile
        with self.assertRaises(StopIteration):
            s.next()
        self.assertEqual((slept, len(srv.requests), s.delivered), ([], 1, 1))

    def test_a_copy_opens_its_own_reader(self):
        srv = Server([chunk(4, 0), chunk(8, 1)])
        s, _ = stream(srv)
        s.next()
        s.commit()
        c = pickle.loads(pickle.dumps(s))
        self.assertIsNone(c._reader)
        self.assertEqual((c.state, c.delivered), (s.state, 1))


class Clock:
    """Time that moves only when the stream sleeps or a scripted event
    says so: the deadline arithmetic is checked exactly, without waiting."""

    def __init__(self):
        self.now = 0.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


class Costly(Server):
    """A Server whose opens take time: cost(timeout) seconds each (a
    connection attempt that waits), and whose readers' reads take read_cost."""

    def __init__(self, clock, *scripts, cost=lambda timeout: 0.0, read_cost=0.0):
        super().__init__(*scripts)
        self.clock, self.cost, self.read_cost = clock, cost, read_cost

    def open(self, req, timeout=None):
        self.clock.now += self.cost(timeout)
        r = super().open(req, timeout)
        clock, cost, read = self.clock, self.read_cost, r.read_chunk

        def slow_read():
            clock.now += cost
            return read()

        r.read_chunk = slow_read
        return r


def timed(srv, clock, timeout=1.0, **kw):
    kw.setdefault("retries", 100)
    return Resumable(
        Request(shards="s", start=ResumeState(seed=1), batch_size=4),
        srv.open,
        meta,
        retryable=(Lost,),
        failures=(Refused,),
        backoff=0.1,
        max_backoff=0.25,
        sleep=clock.sleep,
        clock=clock,
        timeout=timeout,
        **kw,
    )


class TimeoutTest(unittest.TestCase):
    def test_timeout_bounds_a_row_of_refused_connections(self):
        clock = Clock()
        srv = Costly(clock, *[Lost(f"refused {i}") for i in range(50)])
        s = timed(srv, clock)
        with self.assertRaises(StreamError) as cm:
            s.next()
        # 0.1 + 0.2 + 0.25 + 0.25 = 0.8 s: one more 0.25 s wait would end
        # past the 1 s row, so the row ends after the fifth attempt.
        self.assertEqual(clock.slept, [0.1, 0.2, 0.25, 0.25])
        self.assertEqual(len(srv.requests), 5)
        self.assertIn("5 attempts failed within the 1 s timeout, last: refused 4", str(cm.exception))
        # each open is given what is left of the row
        self.assertEqual([round(t, 6) for t in srv.timeouts], [1.0, 0.9, 0.7, 0.45, 0.2])
        self.assertLessEqual(clock.now, 1.0)
        self.assertTrue(s.done)

    def test_a_connection_attempt_that_waits_out_the_timeout_ends_the_row(self):
        clock = Clock()
        srv = Costly(clock, Lost("connect timed out"), [chunk(4, 0)], cost=lambda timeout: timeout)
        s = timed(srv, clock, timeout=5.0)
        with self.assertRaises(StreamError) as cm:
            s.next()
        self.assertEqual((clock.slept, len(srv.requests), clock.now), ([], 1, 5.0))
        self.assertIn("1 attempts failed within the 5 s timeout", str(cm.exception))

    def test_a_row_after_a_drop_starts_at_the_drop(self):
        # Reads slower than the timeout (a slow server, a full queue) are
        # not part of a row of failures: the reconnect still gets its time.
        clock = Clock()
        srv = Costly(clock, [chunk(4, 0), chunk(8, 1), Lost("reset")], Lost("refused"), [chunk(12, 2)], read_cost=3.0)
        s = timed(srv, clock, timeout=1.0)
        self.assertEqual([st.consumed for _, st in drain(s)], [4, 8, 12])
        self.assertEqual(clock.slept, [0.1, 0.2])
        self.assertEqual(srv.timeouts[0], 1.0)
        self.assertAlmostEqual(srv.timeouts[1], 0.9)

    def test_without_a_timeout_only_retries_bound_the_row(self):
        clock = Clock()
        srv = Costly(clock, *[Lost("refused")] * 4, [chunk(4, 0)], cost=lambda timeout: 30.0)
        s = timed(srv, clock, timeout=None)
        self.assertEqual([st.consumed for _, st in drain(s)], [4])
        self.assertEqual(srv.timeouts, [None] * 5)

    def test_a_bad_timeout_is_refused(self):
        from segpipe.request import RequestError

        for bad in (0, -1.0):
            with self.assertRaises(RequestError):
                timed(Server(), Clock(), timeout=bad)


if __name__ == "__main__":
    unittest.main()
