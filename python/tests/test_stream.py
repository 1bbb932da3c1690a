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

    def open(self, req):
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

    def test_a_copy_opens_its_own_reader(self):
        srv = Server([chunk(4, 0), chunk(8, 1)])
        s, _ = stream(srv)
        s.next()
        s.commit()
        c = pickle.loads(pickle.dumps(s))
        self.assertIsNone(c._reader)
        self.assertEqual((c.state, c.delivered), (s.state, 1))


if __name__ == "__main__":
    unittest.main()
