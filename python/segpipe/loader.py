"""Loader: segpipe's loader inside the training process, without a server.

The Go loader is a shared library (``libsegpipe.so``, built from
python/native with ``go build -buildmode=c-shared``, shipped in the wheel);
each epoch pass opens it with a loader request (the same JSON and the same
checks as a ``segpipe serve`` ticket) and imports its batches through the
Arrow C stream interface: pyarrow wraps the buffers the Go side allocated in
C memory, so no byte of a batch is copied between Go and Python, and the
batch dicts are made by the same conversion as FlightBatches'
(segpipe.batch).

The library starts the Go runtime and its threads in this process: a child
made by fork (a DataLoader worker with the "fork" start method) cannot use
it, and is refused with a clear error. Use ``num_workers=0``: the loader
runs its own threads.

A forked child never calls into the library, not even to clean up: a call
there waits forever for Go threads that fork does not copy. Closing,
finishing a pass and collecting an inherited Loader or pass do nothing in
a child, and the batches' and streams' release callbacks (which pyarrow
calls when it frees an imported batch) check the process in C and return
at once (python/native forkguard.go): what an inherited batch holds is
leaked in the child, freed when it exits, as os._exit would leave it.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from typing import Any, Iterator

import pyarrow as pa

from .dist import rank_and_world
from .epochs import EpochStream
from .request import Request, RequestError, ResumeState, check_max_memory, fraction_rows
from .stream import StreamError

#: Environment variable naming a libsegpipe.so to use instead of the one
#: installed with the package (a development build).
LIBRARY_ENV = "SEGPIPE_LIBRARY"


class _ArrowArrayStream(ctypes.Structure):
    # The Arrow C stream interface's struct, filled by the library and moved
    # into pyarrow by RecordBatchReader._import_from_c.
    _fields_ = [
        ("get_schema", ctypes.c_void_p),
        ("get_next", ctypes.c_void_p),
        ("get_last_error", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_pid: int | None = None


def library_path() -> str:
    """The shared library this process uses: $SEGPIPE_LIBRARY, else the one
    installed beside this module."""
    p = os.environ.get(LIBRARY_ENV)
    if p:
        return p
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", "libsegpipe.so")


def forked() -> bool:
    """Whether this process is a fork of the one that loaded the library
    (which must then never call into it)."""
    return _lib_pid is not None and _lib_pid != os.getpid()


def _forked_error() -> RuntimeError:
    return RuntimeError(
        f"segpipe.Loader: the Go runtime was started in process {_lib_pid}; this process ({os.getpid()}) "
        "is a fork of it and cannot use it. Use num_workers=0 with a DataLoader (the loader runs its own "
        "threads), or the 'spawn' start method"
    )


def native() -> ctypes.CDLL:
    """The loaded library (loaded once per process)."""
    global _lib, _lib_pid
    with _lib_lock:
        if _lib is not None:
            if forked():
                raise _forked_error()
            return _lib
        path = library_path()
        if not os.path.exists(path):
            raise RuntimeError(
                f"segpipe.Loader: no loader library at {path}: install the segpipe wheel, build it with "
                f"`pip install ./python` from a checkout (needs Go and a C compiler), or set {LIBRARY_ENV}"
            )
        lib = ctypes.CDLL(path)
        lib.segpipe_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_ArrowArrayStream), ctypes.c_char_p, ctypes.c_size_t]
        lib.segpipe_open.restype = ctypes.c_int64
        for f in (lib.segpipe_state, lib.segpipe_summary):
            f.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_size_t]
            f.restype = ctypes.c_int
        lib.segpipe_close.argtypes = [ctypes.c_int64]
        lib.segpipe_close.restype = None
        lib.segpipe_version.argtypes = []
        lib.segpipe_version.restype = ctypes.c_char_p
        _lib, _lib_pid = lib, os.getpid()
        return lib


def version() -> str:
    """The Go library's segpipe version."""
    return native().segpipe_version().decode()


def _json_call(fn, h: int) -> dict:
    if forked():
        raise _forked_error()
    cap = 4096
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = fn(h, buf, cap)
        if n < 0:
            raise StreamError(f"segpipe library: handle {h} is closed")
        if n < cap:
            return json.loads(buf.raw[:n])
        cap = n + 1


class _Pass:
    """One open of the library: a loader and its exported stream."""

    def __init__(self, request: dict, options: dict):
        lib = native()
        self.lib = lib
        stream = _ArrowArrayStream()
        err = ctypes.create_string_buffer(4096)
        h = lib.segpipe_open(json.dumps(request).encode(), json.dumps(options).encode(), ctypes.byref(stream), err, len(err))
        if h <= 0:
            raise StreamError(err.value.decode(errors="replace") or "segpipe_open failed")
        self.handle = h
        try:
            self.reader = pa.RecordBatchReader._import_from_c(ctypes.addressof(stream))
        except (pa.ArrowException, OSError) as e:
            lib.segpipe_close(h)
            raise StreamError(f"segpipe library: importing the batch stream: {e}") from e
        except BaseException:
            lib.segpipe_close(h)
            raise
        self._closed = False
        self._lock = threading.Lock()

    def state(self) -> ResumeState:
        return ResumeState.coerce(_json_call(self.lib.segpipe_state, self.handle))

    def summary(self) -> dict:
        return _json_call(self.lib.segpipe_summary, self.handle)

    def stop(self) -> None:
        """Stop the loader (any thread): a read in progress returns. Nothing
        in a forked child (see the module doc)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                if not forked():
                    self.lib.segpipe_close(self.handle)

    def close(self) -> None:
        self.stop()
        if not forked():
            self.reader.close()


class Loader(EpochStream):
    """One rank's training batches from segpipe's loader in this process, an
    epoch per iteration: the same batches, dicts, epochs, ``len()``,
    ``set_epoch``, ``state_dict`` and rank rules as FlightBatches, from a
    shard set on disk or in a bucket instead of a server.

        loader = segpipe.Loader("shards/train", batch_size=32, imgsz=640, seed=0)
        for batch in loader: ...

    ``shards`` is one converted shard set (a folder with manifest.json, or
    a bucket URL). ``workers`` (0: one per core), ``prefetch`` (batches the
    Go side builds ahead), ``cache_bytes`` and ``max_memory`` (bytes; None:
    the default budget, half the machine's or container's memory; -1: no
    budget, NO_MEMORY_LIMIT) are the
    loader's settings, as the CLI's flags; a configuration over the budget
    is refused with the figures. Damaged shard data is skipped and counted
    (``skipped``) unless ``strict``. ``classes``, ``single_cls`` and
    ``fraction`` are Ultralytics' dataset options, and ``rect`` and
    ``multi_scale`` its batch shapes, as for FlightBatches.
    ``record_batches()`` gives the Arrow
    records themselves, for code that wants Arrow rather than tensors, and
    ``segpipe.numpy_batch(record)`` their numpy form (views, no copy).

    Only pyarrow and numpy are needed for those: iterating for tensors,
    ``device`` and ``pin_memory`` need the ``segpipe[torch]`` extra.
    """

    def __init__(
        self,
        shards: str,
        *,
        batch_size: int = 32,
        imgsz: int = 640,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        masks: str = "dense",
        start: ResumeState | dict | None = None,
        epochs: int = 0,
        close_mosaic: int = 0,
        val: bool = False,
        augment: dict | None = None,
        limit: int = 0,
        classes: list[int] | None = None,
        single_cls: bool = False,
        fraction: float = 0.0,
        rect: bool = False,
        multi_scale: float = 0.0,
        even_batches: bool | None = None,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        prefetch: int = 2,
        timeout: float = 300.0,
        workers: int = 0,
        loader_prefetch: int = 0,
        cache_bytes: int = 0,
        max_memory: int | None = None,
        strict: bool = False,
    ):
        if not isinstance(shards, str) or not shards:
            raise RequestError(f"shards {shards!r}: want a shard set folder or bucket URL")
        r, w = rank_and_world(rank, world_size)
        st = ResumeState.coerce(start) if start is not None else ResumeState(seed=seed)
        # The request is checked as a ticket is; the shard set travels
        # apart (a local path, which a ticket's relative name cannot be).
        request = Request(
            shards=".", start=st, rank=r, world_size=w, batch_size=batch_size, imgsz=imgsz,
            val=val, augment=augment, masks=masks, limit=limit,
            classes=classes, single_cls=single_cls, fraction=fraction, rect=rect, multi_scale=multi_scale,
        )  # fmt: skip
        super().__init__(
            request,
            epochs=epochs,
            close_mosaic=close_mosaic,
            even_batches=even_batches,
            device=device,
            pin_memory=pin_memory,
            prefetch=prefetch,
            timeout=timeout,
            where=shards,
        )
        for name, v in (("workers", workers), ("loader_prefetch", loader_prefetch), ("cache_bytes", cache_bytes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise RequestError(f"{name} {v!r}: want an integer >= 0")
        self.shards = shards
        self.options: dict[str, Any] = {"workers": workers, "prefetch": loader_prefetch, "cache_bytes": cache_bytes, "strict": bool(strict)}
        if max_memory is not None:
            self.options["max_memory"] = check_max_memory(max_memory)
        self._images: int | None = None
        self._live: _Pass | None = None
        #: Skip counts of the passes so far, by reason (as bench reports them).
        self.skipped: dict[str, int] = {}

    def images(self) -> int:
        if self._images is None:
            # A fraction reads a prefix of the set (pipeline.FractionRows).
            self._images = fraction_rows(_manifest_rows(self.shards), self.request.fraction)
        return self._images

    def _request_json(self, req: Request) -> dict:
        d = req.to_json()
        d["shards"] = self.shards
        return d

    def _open(self, req: Request) -> _Pass:
        p = _Pass(self._request_json(req), self.options)
        self._live = p
        return p

    def _finish(self, p: _Pass) -> None:
        if forked():
            # A pass inherited from the parent, finished by the child's exit
            # or collector: nothing to count, nothing to call.
            if self._live is p:
                self._live = None
            return
        try:
            for k, v in (p.summary().get("skipped") or {}).items():
                self.skipped[k] = self.skipped.get(k, 0) + int(v)
        except StreamError:
            pass  # stopped from another thread: no summary to add
        p.close()
        if self._live is p:
            self._live = None

    def _open_pass(self, req: Request, stop: threading.Event) -> Iterator[tuple[pa.RecordBatch, ResumeState]]:
        p = self._open(req)
        try:
            while not stop.is_set():
                try:
                    rb = p.reader.read_next_batch()
                except StopIteration:
                    return
                except (pa.ArrowException, OSError) as e:
                    # pyarrow raises a stream's error as a bare OSError when
                    # it carries an errno, which the C stream's always do.
                    if stop.is_set():
                        return
                    raise StreamError(f"loader over {self.shards}: {e}") from e
                yield rb, p.state()
        finally:
            self._finish(p)

    def _interrupt(self) -> None:
        p = getattr(self, "_live", None)
        if p is not None:
            p.stop()

    def record_batches(self) -> pa.RecordBatchReader:
        """The rest of the current epoch as a pyarrow.RecordBatchReader over
        the library's records (no copy): Arrow rather than tensors, numpy
        arrays through ``segpipe.numpy_batch``; no torch needed. Reading
        it to its end moves this loader to the next epoch, as iterating it
        does; state_dict() follows the batches read."""
        # One pass is live at a time: this one replaces a pass started ahead.
        self._drop_ahead()
        req = self._pass_request()
        start = self._state
        if req is None:
            self._state = ResumeState(seed=start.seed, epoch=start.epoch + 1)
            return pa.RecordBatchReader.from_batches(_schema_of(self), [])
        p = self._open(req)
        schema = p.reader.schema

        def gen() -> Iterator[pa.RecordBatch]:
            try:
                while True:
                    try:
                        rb = p.reader.read_next_batch()
                    except StopIteration:
                        break
                    except (pa.ArrowException, OSError) as e:
                        raise StreamError(f"loader over {self.shards}: {e}") from e
                    self._state = p.state()
                    self._delivered += 1
                    yield rb
                self._state = ResumeState(seed=start.seed, epoch=start.epoch + 1)
            finally:
                self._finish(p)

        return pa.RecordBatchReader.from_batches(schema, gen())


def _schema_of(loader: Loader) -> pa.Schema:
    # The schema of a pass that yields nothing: the library's, from a pass
    # of one batch that is never read.
    from dataclasses import replace

    p = loader._open(replace(loader.request, start=ResumeState(seed=loader._state.seed, epoch=loader._state.epoch), limit=1))
    try:
        return p.reader.schema
    finally:
        loader._finish(p)


def _manifest_rows(shards: str) -> int:
    """Rows of a shard set's manifest (local folder, file:// or a bucket
    pyarrow.fs can open)."""
    try:
        if "://" in shards and not shards.startswith("file://"):
            import pyarrow.fs as pafs

            fs, path = pafs.FileSystem.from_uri(shards.rstrip("/") + "/manifest.json")
            with fs.open_input_stream(path) as f:
                m = json.loads(f.read())
        else:
            path = shards[len("file://") :] if shards.startswith("file://") else shards
            with open(os.path.join(path, "manifest.json")) as f:
                m = json.load(f)
        return int(m["rows"])
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as e:
        raise StreamError(f"shard set {shards}: manifest.json: {e}") from e
