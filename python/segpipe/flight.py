"""FlightBatches: one rank's training batches from `segpipe serve` as tensors.

Each Flight message is one Arrow record of the formats/batch schema (or its
windowed form); the tensors handed out are views of the record's buffers
(``torch.from_numpy`` over numpy views of the Arrow buffers, no copy), except
windowed masks, which are expanded into a fresh stack (segpipe.batch). Treat
them as read-only: they alias memory that pyarrow received from gRPC; clone
before editing in place.

Fork: gRPC supports a forked child only where the parent had not used gRPC
before the fork (grpc/grpc doc/fork_support.md, "use after fork"; its
fork support for pre-fork use is Python-binding-only and does not reach
the gRPC inside pyarrow). A child of a process that made a Flight client
hangs on its first call, on the inherited channel and on a new one alike.
So a forked child (a DataLoader worker with the "fork" start method) of a
process that used FlightBatches is refused with a StreamError saying what
to do; its inherited clients, streams and read-ahead are set aside at the
fork without a call into them (their destructors call into gRPC too) and
kept for the child's lifetime. A child of a process that never connected
connects by itself.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import weakref
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.flight as flight

from .batch import (  # noqa: F401  (re-exported: the conversion's old home)
    BASE_COLUMNS,
    CANVAS_COLUMN,
    DENSE_COLUMNS,
    TENSOR_KEYS,
    WINDOWED_COLUMNS,
    Batch,
    per_image,
    record_arrays,
    to_tensors,
)
from .dist import rank_and_world
from .epochs import EpochStream
from .request import MASKS_WINDOWED, Request, RequestError, ResumeState, fraction_rows
from .stream import Resumable, StreamError

#: The process that made this module's first Flight client: gRPC is
#: initialised there, and in no process forked from it can it be used.
_grpc_pid: int | None = None
#: Every FlightBatches, for the fork handler.
_streams: "weakref.WeakSet[FlightBatches]" = weakref.WeakSet()


#: Environment variable naming FlightBatches' default transport ("pyarrow"
#: or "native"), for a trainer that makes its streams in code it does not
#: own (the Ultralytics adapter).
TRANSPORT_ENV = "SEGPIPE_FLIGHT_TRANSPORT"


def _keep_forever(obj: Any) -> None:
    # One reference nobody holds: the object outlives the child's
    # interpreter, whose shutdown would otherwise run its destructor (a
    # call into the parent's gRPC state, which may block for good).
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _after_fork_in_child() -> None:
    for fb in list(_streams):
        fb._set_aside()


os.register_at_fork(after_in_child=_after_fork_in_child)


#: glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
#: Whether keep_receive_memory applied in this process (once is enough).
_malloc_tuned = False


def keep_receive_memory() -> bool:
    """Make glibc's malloc keep the memory of received batches for the next
    ones instead of handing it back to the kernel; returns whether it
    applied (glibc only). FlightBatches calls it when it is made, unless
    SEGPIPE_MALLOC_KEEP=0; a process that starts threads of its own before
    it makes one may call it first thing.

    gRPC hands pyarrow a batch message (40 MB for 32 images at 640 px) in
    one block from malloc. glibc serves a block that large with mmap and
    unmaps it on free, so each batch lands in fresh pages: the kernel
    faults in and zeroes 10,000 pages a batch, which measured two thirds of
    the receiving process's CPU (tests/profile_flight_client.py). Raising
    the mmap and trim thresholds lets a freed block serve the next batch
    from the heap, and one arena for every thread keeps a block freed by
    the read-ahead thread from being unmapped with a per-thread heap; the
    process then keeps about (prefetch + 2) batches of memory it would
    otherwise return between batches. A process-wide setting: one with
    other needs can opt out with the variable."""
    global _malloc_tuned
    if _malloc_tuned or os.environ.get("SEGPIPE_MALLOC_KEEP", "1") == "0":
        return _malloc_tuned
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # Above the largest batch a trainer asks for; c_int bounds both.
    ok = mallopt(_M_MMAP_THRESHOLD, 1 << 30) == 1 and mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1) == 1
    ok = ok and mallopt(_M_ARENA_MAX, 1) == 1
    _malloc_tuned = ok
    return ok


def _forked_error(what: str) -> StreamError:
    return StreamError(
        f"FlightBatches: {what} in process {os.getpid()}, a fork of process {_grpc_pid}, which used gRPC "
        "(a Flight client) before the fork; gRPC cannot be used in such a child, with the parent's connection or "
        "a new one. With a DataLoader use multiprocessing_context='spawn' (or 'forkserver'), or num_workers=0 "
        "(the stream reads ahead in its own thread)"
    )


def _app_metadata(chunk: Any) -> bytes | None:
    return chunk.app_metadata.to_pybytes() if chunk.app_metadata is not None else None


def location(addr: str, tls: Any) -> str:
    if "://" in addr:
        return addr
    return ("grpc+tls://" if tls else "grpc://") + addr


def transport_failure(e: BaseException) -> bool:
    """Whether a pyarrow Flight error is one the Go client retries
    (pipeline/remote client.go: Unavailable, Internal, Unknown, Aborted,
    ResourceExhausted): a lost connection, or a server that is busy now.

    pyarrow keeps the gRPC code of some statuses as the exception's type
    (FlightUnavailableError, FlightInternalError) and of the others only in
    the message: Arrow's gRPC transport raises RESOURCE_EXHAUSTED (the
    server's admission refusal) as ArrowInvalid "gRPC returned resource
    exhausted error", ABORTED as "gRPC returned aborted error", and UNKNOWN
    as "Flight RPC failed with message". The integration tests hold this
    against a real server on the oldest and newest pyarrow supported."""
    if isinstance(e, (flight.FlightUnavailableError, flight.FlightInternalError)):
        return True
    if isinstance(e, flight.FlightError) or not isinstance(e, pa.ArrowException):
        return False
    msg = str(e)
    return any(m in msg for m in _RETRYABLE_MESSAGES)


_RETRYABLE_MESSAGES = (
    "gRPC returned resource exhausted error",
    "gRPC returned aborted error",
    "Flight RPC failed with message",
)


class FlightBatches(EpochStream):
    """One rank's training batches from a segpipe server, an epoch per
    iteration.

    Iterating yields ``Batch`` dicts of tensors (segpipe.batch.Batch):
    ``images`` uint8 (N, 3, H, W) RGB; ``image_id``, ``orig_height``,
    ``orig_width``, ``transform`` (N, 6); ``boxes`` (sum_N, 4) xyxy canvas
    pixels, ``classes``, ``iscrowd``; ``boxes_per_image`` (N,) and ``offsets``
    (N+1,); ``masks`` uint8 (sum_N, H/4, W/4) of {0, 1} (see ``per_image``);
    ``state`` the ResumeState after the batch and ``batch`` its index.

    Epochs, as a DataLoader over a DistributedSampler: each ``iter()``
    streams the rest of the current epoch and then moves to the next one;
    ``set_epoch(e)`` picks the epoch, ``len()`` is the number of batches the
    next iteration yields, ``state_dict()``/``load_state_dict()`` save and
    restore the position between any two batches. ``epochs`` (0: open
    ended) bounds the schedule, and mosaic is off in its last
    ``close_mosaic`` epochs, as the server's own schedule has it.

    Ranks: rank and world_size default to torch.distributed's global rank
    (see rank_and_world). With ``even_batches`` (the default for training)
    every rank gets as many batches per epoch as the rank with the fewest,
    so that DDP's collectives stay in step; up to world_size - 1 samples of
    an epoch are then left out, as DistributedSampler(drop_last=True) does
    (the shuffle differs by epoch, so not always the same ones). A
    validation stream (``val=True``) keeps every image by default.

    Reading: a background thread keeps ``prefetch`` batches converted
    ahead (windowed masks are expanded there, or on a CUDA ``device``, after
    their w*h bytes an instance travel there). A dropped connection or a
    busy server (admission refused) is retried from the last state, after
    backoff, 2*backoff, ... up to max_backoff, ``retries`` times in a row;
    answers (bad request, unknown shard set, authentication) fail at once.
    No batch within ``timeout`` seconds ends the pass with StreamError (a
    hung server never hangs the trainer); ``timeout`` also bounds a
    connection attempt and each row of failed attempts as a whole
    (backoffs included), so a stopped server fails within about
    ``timeout`` seconds, not after gRPC's 20 s connect limit per attempt.
    Every read failure, and iterating after ``close()``, raises
    StreamError. ``compression`` ("lz4" or "zstd"; None, the default, for
    none) has the server compress each record's buffers, which pyarrow
    undoes on read: fewer bytes on the wire for CPU on both ends, the same
    tensors (BENCHMARKS.md has the trade per option). ``classes``,
    ``single_cls`` and ``fraction`` are Ultralytics' dataset options, applied
    by the loader: keep only these classes' instances, make every class 0,
    read the first max(1, round(n * fraction)) images in manifest order.
    ``rect`` and ``multi_scale`` (training) are Ultralytics' batch shapes:
    each batch's images and masks are views of its live canvas
    (Request.rect, Request.multi_scale).
    Making one sets glibc's malloc to keep freed batch memory for the next
    batches (keep_receive_memory; SEGPIPE_MALLOC_KEEP=0 opts out), which
    halves the receiving CPU.
    ``transport="native"`` reads the batches through the loader library's
    Go client (segpipe.Loader's library, segpipe.h "remote") instead of
    pyarrow's: the same records, states, retries, backoff and timeout, with
    one copy where pyarrow's gRPC makes two (BENCHMARKS.md, "Receiving
    CPU"). Two differences: a busy server's refusal is a queue there, as in
    the Go client (waited for within ``timeout``, not counted against
    ``retries``), and a read failure's cause is the OSError pyarrow raises
    for a C stream's error. Only the batch stream moves: ``len()`` and
    ``dataset_info()`` still ask through pyarrow. It needs the library (a
    wheel, or SEGPIPE_LIBRARY), and a forked child of a process that used
    either is refused as above. The default is $SEGPIPE_FLIGHT_TRANSPORT
    (which reaches streams made by code one does not own, such as the
    Ultralytics adapter), else "pyarrow". ``device`` moves each batch there
    (``pin_memory`` first copies it into page-locked memory, so that the
    copy to a CUDA device is asynchronous).

    With a DataLoader use ``batch_size=None`` and at most one worker: the
    server does the loading. With one worker the stream runs in the
    worker's copy: call ``set_epoch`` before each epoch, and save each
    batch's ``state`` rather than this object's ``state_dict()``. Give that
    DataLoader ``multiprocessing_context="spawn"`` (or "forkserver"): a
    worker forked from a process that already connected (``len()``,
    ``dataset_info()``, an iteration) is refused, as gRPC requires (see
    the module doc).
    """

    def __init__(
        self,
        addr: str,
        shards: str,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        batch_size: int = 32,
        imgsz: int = 640,
        masks: str = "dense",
        start: ResumeState | dict | None = None,
        token: str | None = None,
        tls: bool | str | bytes = False,
        epochs: int = 0,
        close_mosaic: int = 0,
        val: bool = False,
        augment: dict | None = None,
        limit: int = 0,
        compression: str | None = None,
        classes: list[int] | None = None,
        single_cls: bool = False,
        fraction: float = 0.0,
        rect: bool = False,
        multi_scale: float = 0.0,
        even_batches: bool | None = None,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        prefetch: int = 2,
        timeout: float = 60.0,
        retries: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        transport: str | None = None,
    ):
        if transport is None:
            transport = os.environ.get(TRANSPORT_ENV) or "pyarrow"
        if transport not in ("pyarrow", "native"):
            raise RequestError(f"transport {transport!r}: want 'pyarrow' or 'native'")
        r, w = rank_and_world(rank, world_size)
        request = Request(
            shards=shards,
            start=ResumeState.coerce(start),
            rank=r,
            world_size=w,
            batch_size=batch_size,
            imgsz=imgsz,
            val=val,
            augment=augment,
            masks=masks,
            limit=limit,
            compression="" if compression is None else compression,
            classes=classes,
            single_cls=single_cls,
            fraction=fraction,
            rect=rect,
            multi_scale=multi_scale,
        )
        super().__init__(
            request,
            epochs=epochs,
            close_mosaic=close_mosaic,
            even_batches=even_batches,
            device=device,
            pin_memory=pin_memory,
            prefetch=prefetch,
            timeout=timeout,
            where=addr,
        )
        # Here, in the thread that makes the stream, before the read-ahead
        # thread exists: glibc gives a thread its arena at its first malloc,
        # and only arenas made after the setting share the main one.
        keep_receive_memory()
        # Checked here, not on the first read: a bad setting fails at once.
        Resumable(request, self._open, _app_metadata, retries=retries, backoff=backoff, max_backoff=max_backoff, timeout=self.timeout)
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        self.addr = addr
        self.transport = transport
        if transport == "native":
            # The library bounds the open and every batch by timeout and
            # names the cause (segpipe.h "remote"); its clock starts a
            # little after the consumer's, once the library is loaded.
            self.timeout_grace = 1.0
        self._location = location(addr, tls)
        self._tls = tls
        self._token = token
        self._headers = [(b"authorization", b"Bearer " + token.encode())] if token else []
        self._client: flight.FlightClient | None = None
        self._info: dict | None = None
        self._live: Resumable | None = None
        self._closed = False
        _streams.add(self)

    # -- connection ---------------------------------------------------------

    def _options(self, timeout: float | None = None) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(headers=self._headers, timeout=timeout)

    def client(self) -> flight.FlightClient:
        """The Flight client, connected on first use."""
        global _grpc_pid
        if self._closed:
            raise StreamError(f"FlightBatches from {self.addr} is closed")
        if self._client is None:
            if _grpc_pid is not None and _grpc_pid != os.getpid():
                raise _forked_error("connecting")
            kw = {}
            if isinstance(self._tls, (str, bytes)):
                pem = self._tls
                if isinstance(pem, str):
                    with open(pem, "rb") as f:
                        pem = f.read()
                kw["tls_root_certs"] = pem
            self._client = flight.FlightClient(self._location, **kw)
            if _grpc_pid is None:
                _grpc_pid = os.getpid()
        return self._client

    def _set_aside(self) -> None:
        """In a forked child: forget the parent's client, stream and
        read-ahead without calling into them (see the module doc)."""
        for name in ("_client", "_live", "_ahead"):
            obj = self.__dict__.get(name)
            if obj is not None:
                _keep_forever(obj)
                self.__dict__[name] = None

    def dataset_info(self) -> dict:
        """GetFlightInfo's description of the shard set: {"images": N,
        "categories": [{"id", "index", "name", ...}, ...]} (asked once)."""
        if self._info is not None:
            return self._info
        req = Request(shards=self.request.shards)
        try:
            info = self.client().get_flight_info(
                flight.FlightDescriptor.for_command(req.ticket()), self._options(self.timeout)
            )
        except (pa.ArrowException, flight.FlightError) as e:
            raise StreamError(f"flight info for shard set {self.request.shards!r} from {self.addr}: {e}") from e
        raw = info.app_metadata
        if not raw:
            raise StreamError(f"{self.addr} does not describe shard set {self.request.shards!r} (an older server)")
        try:
            d = json.loads(bytes(raw))
            int(d["images"])
        except (ValueError, KeyError, TypeError) as e:
            raise StreamError(f"{self.addr}: description of shard set {self.request.shards!r} is not segpipe's: {e}") from None
        self._info = d
        return d

    def images(self) -> int:
        # dataset_info describes the whole set; a fraction reads a prefix.
        return fraction_rows(int(self.dataset_info()["images"]), self.request.fraction)

    def _probe(self, client: flight.FlightClient, timeout: float) -> None:
        """Connect within timeout seconds. A stream cannot have a deadline
        (it would end the stream), and DoGet waits for its schema without
        one, for gRPC's 20 s connect limit on a stopped host or forever on
        a hung server; an RPC with a deadline connects first. Any answer,
        ListActions unimplemented or a refused token included, proves the
        server is there (DoGet then gives the answer that counts)."""
        try:
            for _ in client.list_actions(self._options(timeout)):
                pass
        except flight.FlightTimedOutError as e:
            raise StreamError(f"no answer from {self.addr} within {timeout:.3g} s (timeout): {e}") from e
        except flight.FlightUnavailableError:
            raise  # retried, as a DoGet's would be
        except (pa.ArrowException, flight.FlightError):
            pass

    def _open(self, req: Request, timeout: float | None = None):
        client = self.client()
        if timeout is not None:
            self._probe(client, timeout)
        reader = client.do_get(flight.Ticket(req.ticket()), self._options())
        names = tuple(reader.schema.names)
        want = WINDOWED_COLUMNS if req.transport == MASKS_WINDOWED else DENSE_COLUMNS
        if req.rect or req.multi_scale:
            want += (CANVAS_COLUMN,)
        if names != want:
            reader.cancel()
            raise StreamError(f"server sent columns {list(names)}, want {list(want)}")
        return reader

    def _native_options(self) -> dict:
        """segpipe.h's "remote" options for this stream."""
        loc = self._location
        scheme, _, hostport = loc.partition("://")
        if scheme not in ("grpc", "grpc+tcp", "grpc+tls"):
            raise StreamError(f"FlightBatches from {self.addr}: transport='native' reads grpc:// and grpc+tls:// locations, not {scheme}://")
        o: dict[str, Any] = {"addr": hostport, "retries": self.retries, "backoff": self.backoff, "max_backoff": self.max_backoff}
        if self.timeout:
            o["timeout"] = self.timeout
        if self._token:
            o["token"] = self._token
        if scheme == "grpc+tls":
            o["tls"] = True
            if isinstance(self._tls, (str, bytes)):
                pem = self._tls
                if isinstance(pem, str):
                    with open(pem, "rb") as f:
                        pem = f.read()
                o["tls_roots"] = pem.decode()
        return {"remote": o}

    def _open_native_pass(self, req: Request, stop: threading.Event) -> Iterator[tuple[pa.RecordBatch, ResumeState]]:
        from .loader import _Pass, forked

        if forked() or (_grpc_pid is not None and _grpc_pid != os.getpid()):
            raise _forked_error("iterating")
        try:
            p = _Pass(json.loads(req.ticket()), self._native_options())
        except RuntimeError as e:  # no library
            raise StreamError(f"FlightBatches from {self.addr}: {e}") from e
        except StreamError as e:
            raise StreamError(f"FlightBatches from {self.addr}: {e}") from e.__cause__
        self._live = p
        try:
            while not stop.is_set():
                try:
                    rb = p.reader.read_next_batch()
                except StopIteration:
                    if self._closed and not stop.is_set():
                        raise StreamError(f"FlightBatches from {self.addr} was closed during the pass") from None
                    return
                except (pa.ArrowException, OSError) as e:
                    # pyarrow raises the stream's error as an OSError (it
                    # carries an errno), as segpipe.Loader's.
                    if stop.is_set():
                        return
                    if self._closed:
                        raise StreamError(f"FlightBatches from {self.addr} was closed during the pass") from e
                    raise StreamError(f"FlightBatches from {self.addr}: {e}") from e
                yield rb, p.state()
        finally:
            self._live = None
            if not forked():
                p.close()

    def _open_pass(self, req: Request, stop: threading.Event) -> Iterator[tuple[pa.RecordBatch, ResumeState]]:
        if self.transport == "native":
            yield from self._open_native_pass(req, stop)
            return
        rs = Resumable(
            req,
            self._open,
            _app_metadata,
            retryable=transport_failure,
            failures=(pa.ArrowException, flight.FlightError),
            retries=self.retries,
            backoff=self.backoff,
            max_backoff=self.max_backoff,
            where=self.addr,
            sleep=stop.wait,
            timeout=self.timeout,
        )
        self._live = rs
        try:
            while not stop.is_set():
                try:
                    chunk = rs.next()
                except StopIteration:
                    if self._closed and not stop.is_set():
                        # Not a whole pass: the consumer must not move on
                        # to the next epoch as if it were.
                        raise StreamError(f"FlightBatches from {self.addr} was closed during the pass") from None
                    return
                yield chunk.data, rs.commit()
        finally:
            self._live = None
            rs.close()

    def _interrupt(self) -> None:
        live = getattr(self, "_live", None)
        if isinstance(live, Resumable):
            live.close()
        elif live is not None:
            live.stop()  # a native pass (segpipe.loader._Pass)

    def __iter__(self) -> Iterator[Batch]:
        # Refused here, at the first step, not one timeout later from the
        # read-ahead thread.
        it = super().__iter__()  # its refusals (DataLoader workers) first; nothing runs yet
        if self._closed:
            raise StreamError(f"FlightBatches from {self.addr} is closed: make a new one to read again")
        if _grpc_pid is not None and _grpc_pid != os.getpid():
            raise _forked_error("iterating")
        return it

    def close(self) -> None:
        """End a stream in progress (the server stops its loader) and the
        connection. Iterating afterwards raises StreamError."""
        self._closed = True
        super().close()
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict:
        d = super().__getstate__()
        d["_client"] = None
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        _streams.add(self)
