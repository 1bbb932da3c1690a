"""The resumable read loop of a stream, apart from its transport.

Pure Python: FlightBatches gives it a function that opens a DoGet reader for
a request and the exception types that mean "connection lost"; the tests give
it scripted readers. The rules are the Go client's (pipeline/remote
client.go): a dropped stream is reopened from the state of the last batch
delivered with the limit reduced by the batches delivered, after
backoff, 2*backoff, ... up to max_backoff, and fails after ``retries``
attempts in a row; any other failure ends the stream at once, and a limit
already reached, or a schedule whose last epoch was delivered, is never
reopened (limit 0 would mean "no limit").

A ``timeout`` also bounds a row of failed attempts as a whole: the row
starts when the first of them began (the open that failed, or the moment a
stream that was delivering dropped), each open is given the seconds left
of it, and no backoff or attempt starts past it. Without it a stopped
server costs the sum of the backoffs plus each connection attempt's own
wait, which gRPC bounds only at 20 s.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .request import Request, RequestError, ResumeState, parse_app_metadata


class StreamError(RuntimeError):
    """The stream failed: the server refused the request, the connection was
    lost for good, or a batch does not keep the batch contract."""


class Resumable:
    """Chunks of one request's stream, each with the resume state after it.

    open_reader(request, timeout) returns a reader whose read_chunk() returns
    the next chunk (raising StopIteration at the end) and whose cancel() ends
    it; timeout is the seconds left of the row's ``timeout`` (None without
    one), which the transport's connection attempt must not outlast;
    app_metadata(chunk) returns the chunk's app metadata bytes (or None).
    retryable is a tuple of exception types that mean "connection lost", or
    a predicate on an exception; failures are the transport's other
    exception types, which end the stream with a StreamError.
    """

    def __init__(
        self,
        request: Request,
        open_reader: Callable[[Request], Any],
        app_metadata: Callable[[Any], Any],
        *,
        retryable: Any = (),
        failures: tuple = (),
        retries: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        where: str = "the server",
        sleep: Callable[[float], None] = time.sleep,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if retries < 0 or backoff < 0 or max_backoff < backoff:
            raise RequestError(f"retries {retries}, backoff {backoff}, max_backoff {max_backoff}: want retries >= 0 and 0 <= backoff <= max_backoff")
        if timeout is not None and not timeout > 0:
            raise RequestError(f"timeout {timeout!r}: want seconds > 0")
        self.request = request.validate()
        self._open_reader, self._app_metadata = open_reader, app_metadata
        # retryable: exception types, or a predicate for transports whose
        # exception types do not tell a lost connection from an answer
        # (pyarrow raises a server's RESOURCE_EXHAUSTED as ArrowInvalid).
        if callable(retryable) and not isinstance(retryable, (tuple, type)):
            self._is_retryable = retryable
        else:
            types = tuple(retryable) if isinstance(retryable, tuple) else (retryable,)
            self._is_retryable = lambda e: isinstance(e, types)
        self._failures = tuple(failures)
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        self.where, self._sleep = where, sleep
        self.timeout, self._clock = timeout, clock
        self.state: ResumeState = request.start
        self.delivered = 0
        self.done = False
        self._reader: Any = None
        self._pending: ResumeState | None = None

    def __getstate__(self) -> dict:
        # A copy (a DataLoader worker's) opens its own reader.
        d = dict(self.__dict__)
        d["_reader"], d["_open_reader"], d["_is_retryable"] = None, None, None
        return d

    def _drop(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            try:
                reader.cancel()
            except Exception:  # the stream is being dropped anyway
                pass

    def close(self) -> None:
        self.done = True
        self._drop()

    def next(self) -> Any:
        """The next chunk; call commit() once it is delivered. Raises
        StopIteration at the end of the stream, StreamError on failure."""
        if self._pending is not None:
            raise RuntimeError("next() before the previous chunk was committed")
        if self.done or (self.request.limit and self.delivered >= self.request.limit):
            self.close()
            raise StopIteration
        wait, attempts = self.backoff, 0
        row: float | None = None  # when this row of failed attempts began
        while True:
            opening: float | None = None
            try:
                if self._reader is None:
                    if self.request.schedule_done(self.state, self.delivered):
                        # Lost after the last batch, before the stream's end:
                        # nothing is left to reopen for (the server would
                        # refuse the request as empty).
                        raise StopIteration
                    opening = self._clock()
                    left = None
                    if self.timeout is not None:
                        # at least a moment: a zero timeout may mean "none"
                        left = max(self.timeout - (0.0 if row is None else opening - row), 1e-3)
                    self._reader = self._open_reader(self.request.resumed(self.state, self.delivered), left)
                    opening = None
                chunk = self._reader.read_chunk()
                break
            except StopIteration:
                self.close()
                raise
            except Exception as e:
                if self.done:
                    # close() from another thread, whose cancel this is: the
                    # end it asked for, not a failure of the stream.
                    self._drop()
                    raise StopIteration from None
                if not self._is_retryable(e):
                    if isinstance(e, self._failures + (RequestError, StreamError)):
                        self.close()
                        raise StreamError(f"stream from {self.where} after {self.delivered} batches: {e}") from e
                    raise
                self._drop()
                if self.request.schedule_done(self.state, self.delivered):
                    continue  # to the end of the stream, without waiting
                if row is None:
                    # An open's own wait counts; a read's does not (the
                    # batch it waited for may have been slow, not lost).
                    row = opening if opening is not None else self._clock()
                late = self.timeout is not None and self._clock() + wait > row + self.timeout
                if attempts >= self.retries or late:
                    self.done = True
                    if late:
                        why = f"{attempts + 1} attempts failed within the {self.timeout:g} s timeout"
                    else:
                        why = f"{attempts} reconnect attempts failed"
                    raise StreamError(f"stream from {self.where} lost after {self.delivered} batches; {why}, last: {e}") from e
                attempts += 1
                self._sleep(wait)
                wait = min(2 * wait, self.max_backoff)
                if self.done:  # closed from another thread while waiting
                    raise StopIteration
        try:
            self._pending, _ = parse_app_metadata(self._app_metadata(chunk), self.delivered)
        except ValueError as e:
            self.close()
            raise StreamError(f"stream from {self.where}: {e}") from None
        return chunk

    def commit(self) -> ResumeState:
        """Mark the chunk next() returned as delivered; returns its state."""
        if self._pending is None:
            raise RuntimeError("commit() without a chunk from next()")
        self.state, self._pending = self._pending, None
        self.delivered += 1
        return self.state

    def fail(self, e: Exception) -> StreamError:
        """End the stream for a chunk that could not be delivered."""
        self._pending = None
        self.close()
        return StreamError(f"stream from {self.where}: batch {self.delivered}: {e}")
