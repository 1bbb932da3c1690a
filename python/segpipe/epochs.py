"""Epoch passes over a segpipe batch stream, with PyTorch's conventions.

``EpochStream`` is what FlightBatches (and any other transport) share: each
``iter()`` is one epoch pass of this rank's batches, continuing from the
resume state; ``len()`` is the number of batches that pass yields;
``set_epoch``, ``state_dict`` and ``load_state_dict`` behave as a
DistributedSampler's and a stateful DataLoader's do. A background thread
reads and converts batches ahead of the consumer (windowed masks are
expanded there, not on the training thread), so that a batch is ready when
the step asks for it; once an epoch's batches are all read it starts the
next epoch's pass, so that a loader's start-up overlaps the last steps of
the epoch before (``ahead``; the pass is dropped if the next iteration asks
for another epoch).

Even batches: with ``even_batches`` (the default for training) at world size
above one, every rank is promised the same count, ``len()``, the count of the
rank with the fewest samples, so that DDP's collectives stay in step. Damaged
or undecodable samples are skipped where they are met, so a rank can run out
before its promise: its pass is then padded to the promised count by
repeating the last batch it delivered in the pass (the first batch of the
epoch when it delivered none), and a pass that would give more is cut at the
count. Padded batches are counted (``padded``) and logged; they carry the
state of the next epoch's start, as the end of a pass does, so a checkpoint
taken at a padded step resumes at the next epoch (every rank resuming from
one saved state is promised one count again).

torch is optional: without it (``pip install segpipe``, no ``[torch]``)
a stream is a plain object that builds and checks its requests and gives
Arrow records (``Loader.record_batches``); iterating it for tensors,
``device`` and ``pin_memory`` raise an ImportError naming the extra.

A transport implements ``images()`` (the set's image count, for lengths and
even rank splits) and ``_open_pass(request, stop)`` (an iterator of
(record, resume state) for one pass's request), and ``_interrupt()`` (stop a
read in progress from another thread).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Iterator

from . import _torch
from .batch import Batch, expand_on_device, record_arrays, to_tensors
from .request import MASKS_WINDOWED, Request, RequestError, ResumeState, even_batches, rank_batches
from .stream import StreamError

_END = object()

log = logging.getLogger("segpipe")


@dataclass(eq=False)
class _Producer:
    """One pass being read into a queue by its own thread."""

    request: Request
    queue: queue.Queue
    stop: threading.Event
    gate: threading.Lock
    thread: threading.Thread | None = None
    ahead: _Producer | None = None  # the next epoch's pass it started
    # Under gate: a consumer reads this pass (a pass started ahead is not
    # read until an iteration asks for its epoch), and all its batches are
    # read. The next epoch starts once both hold, so that passes started
    # ahead do not chain through epochs nobody asked for.
    adopted: bool = False
    done: bool = False


class EpochStream(_torch.dataset_base()):
    """One rank's batches, an epoch per iteration. See FlightBatches."""

    #: Device types whose windowed masks are expanded on the device
    #: (expand_windows_torch) rather than on the host: a scatter suits a GPU,
    #: block copies the CPU (python/tests/bench_windowed.py).
    EXPAND_ON: tuple[str, ...] = ("cuda",)

    #: Seconds the consumer waits for a batch past ``timeout`` before its own
    #: timer speaks ("no batch in N s"). A transport that bounds each of its
    #: waits by the same timeout and explains an expiry (what it waited for,
    #: how many attempts, the last failure) sets it, so that its error, not
    #: the bare one, reaches the caller: both timers start within moments of
    #: each other, and the transport's would otherwise lose as often as not.
    timeout_grace: float = 0.0

    def __init__(
        self,
        request: Request,
        *,
        epochs: int = 0,
        close_mosaic: int = 0,
        even_batches: bool | None = None,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        prefetch: int = 2,
        timeout: float = 60.0,
        where: str = "the loader",
    ):
        super().__init__()
        for name, v in (("epochs", epochs), ("close_mosaic", close_mosaic), ("prefetch", prefetch)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise RequestError(f"{name} {v!r}: want an integer >= 0")
        if prefetch < 1:
            raise RequestError("prefetch 0: want at least 1 batch read ahead")
        if not timeout > 0:
            raise RequestError(f"timeout {timeout!r}: want seconds > 0")
        if close_mosaic > epochs:
            raise RequestError(f"close_mosaic {close_mosaic} is more than epochs {epochs}")
        self.request = request.validate()
        self.epochs, self.close_mosaic = epochs, close_mosaic
        # Training steps need equal counts; validation needs every image
        # (metrics are gathered after the loop, not per batch).
        self.even_batches = (not request.val) if even_batches is None else bool(even_batches)
        if device is not None or pin_memory:
            torch = _torch.require(f"{type(self).__name__}(device=..., pin_memory=...)")
        self.device = torch.device(device) if device is not None else None
        if pin_memory and not torch.cuda.is_available():
            # As torch's DataLoader does: pinning needs an accelerator.
            warnings.warn("pin_memory=True but no CUDA device is available: batches are not pinned", stacklevel=3)
            pin_memory = False
        self.pin_memory = pin_memory
        self.prefetch, self.timeout, self.where = prefetch, float(timeout), where
        self._state: ResumeState = request.start
        #: Start the next epoch's pass as soon as this one's batches are all
        #: read (a transport still has one pass live at a time). Only where the
        #: schedule is known (epochs > 0): past it, or with no schedule, a
        #: pass started ahead would hold a loader, or a server's stream,
        #: that may never be read.
        self.ahead = epochs > 0
        self._ahead: _Producer | None = None
        self._delivered = 0
        #: Bytes of the Arrow records delivered so far (all buffers).
        self.bytes_received = 0
        #: Batches repeated to keep a rank's promised count (even batches)
        #: when damaged samples made its pass end early, all passes together.
        self.padded = 0
        self._pid = os.getpid()

    # -- what a transport provides -------------------------------------------

    def images(self) -> int:
        """Images in the shard set (for len() and even rank splits)."""
        raise NotImplementedError

    def _open_pass(self, req: Request, stop: threading.Event) -> Iterator[tuple[Any, ResumeState]]:
        raise NotImplementedError

    def _interrupt(self) -> None:
        """Unblock a read in progress (called from the consumer's thread)."""

    def close(self) -> None:
        """Stop a pass in progress (its loader or stream ends), and the next
        epoch's if it was started ahead."""
        self._drop_ahead()
        self._interrupt()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- PyTorch conventions ---------------------------------------------------

    @property
    def rank(self) -> int:
        return self.request.rank

    @property
    def world_size(self) -> int:
        return self.request.world_size or 1

    @property
    def batch_size(self) -> int:
        return self.request.batch_size or 32

    @property
    def epoch(self) -> int:
        """The epoch the next iteration streams."""
        return self._state.epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (from its start, unless a
        loaded state is inside that very epoch: then from there). Optional
        in a single process, where each iteration moves on by itself; needed
        with DataLoader workers, which iterate a copy."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise RequestError(f"epoch {epoch!r}: want an integer >= 0")
        if epoch != self._state.epoch:
            self._state = ResumeState(seed=self._state.seed, epoch=epoch)

    def state(self) -> ResumeState:
        """The resume state after the last batch delivered (the start before
        the first; the next epoch's start after a whole pass)."""
        return self._state

    def state_dict(self) -> dict:
        """The resume state as a plain dict, for a checkpoint."""
        return self._state.to_json()

    def load_state_dict(self, d: dict | ResumeState) -> None:
        """Continue from a saved state_dict(): the next iteration resumes
        exactly after the batch it was taken at."""
        self._state = ResumeState.coerce(d)

    @property
    def delivered(self) -> int:
        """Batches delivered by this object, all passes together."""
        return self._delivered

    def _pass_limit(self, st: ResumeState) -> int | None:
        """Batches the pass from st yields at most: None for "to the end of
        the epoch" (no count needed), else a count (0: nothing)."""
        limit = self.request.limit or None
        if self.even_batches and self.world_size > 1:
            # Every rank takes as many batches as the rank with the fewest
            # (the last one), so that collective ops stay in step: DDP hangs
            # when one rank steps once more than the others.
            even = even_batches(self.images(), self.batch_size, self.world_size, st.consumed)
            limit = even if limit is None else min(limit, even)
        return limit

    def __len__(self) -> int:
        st = self._state
        n = rank_batches(self.images(), self.batch_size, self.rank, self.world_size, st.consumed)
        limit = self._pass_limit(st)
        return n if limit is None else min(n, limit)

    def _pass_request(self) -> Request | None:
        st = self._state
        if self.epochs and st.epoch >= self.epochs:
            raise StreamError(
                f"epoch {st.epoch} is past the {self.epochs} epochs of this stream: "
                "set_epoch() or load_state_dict() to go elsewhere, or make a stream with more epochs"
            )
        return self._request_at(st)

    def _request_at(self, st: ResumeState) -> Request | None:
        """The request of the pass from st to its epoch's end; None when
        that pass has nothing to deliver."""
        closing = bool(self.close_mosaic) and st.epoch >= self.epochs - self.close_mosaic
        limit = self._pass_limit(st)
        if limit == 0:
            return None
        # One request per epoch, ending at its end; close_mosaic 1 of a
        # one-epoch request is what the whole schedule's close_mosaic does
        # to this epoch (the server decides mosaic per epoch).
        return replace(
            self.request, start=st, epochs=st.epoch + 1, close_mosaic=1 if closing else 0, limit=limit or 0
        ).validate()

    def _following(self, st: ResumeState) -> Request | None:
        """The request of the epoch after st's, started ahead while the
        training loop takes st's last batches; None past the schedule."""
        nxt = ResumeState(seed=st.seed, epoch=st.epoch + 1)
        if self.epochs and nxt.epoch >= self.epochs:
            return None
        return self._request_at(nxt)

    def __iter__(self) -> Iterator[Batch]:
        torch = _torch.require(f"iterating {type(self).__name__} (its batches are tensors)")
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                f"{type(self).__name__} in a DataLoader with num_workers > 1 would read the stream once per worker: "
                "use num_workers=0 (or 1) and batch_size=None; segpipe does the loading in its own threads"
            )
        if self._pid != os.getpid():
            # A fork's copy: the producer threads of the parent's passes did
            # not survive the fork, so a pass started ahead would never end.
            self._ahead = None
            self._pid = os.getpid()
        return self._pass()

    def _start(self, req: Request, adopted: bool = False) -> _Producer:
        """A producer thread filling a queue with req's batches; once they
        are all read it starts the next epoch's pass (ahead), so that a
        loader's start-up, its first batches decoded, overlaps the
        training loop's last steps of this epoch instead of following
        them."""
        pr = _Producer(req, queue.Queue(maxsize=self.prefetch), threading.Event(), threading.Lock(), adopted=adopted)
        pr.thread = threading.Thread(target=self._produce, args=(pr,), name="segpipe-prefetch", daemon=True)
        pr.thread.start()
        return pr

    def _take_ahead(self, req: Request) -> _Producer | None:
        """The pass started ahead for req, if that is the one started;
        another is stopped."""
        pr, self._ahead = getattr(self, "_ahead", None), None
        if pr is not None and pr.request != req:
            self._stop(pr)
            pr = None
        if pr is not None:
            with pr.gate:
                pr.adopted = True
                if pr.done:
                    self._chain(pr)
        return pr

    def _chain(self, pr: _Producer) -> None:
        """Start the pass of the epoch after pr's (pr.gate held; pr read
        whole, its loader closed, and adopted)."""
        if pr.stop.is_set() or not self.ahead:
            return
        following = self._following(pr.request.start)
        if following is not None:
            pr.ahead = self._ahead = self._start(following)

    def _stop(self, pr: _Producer) -> None:
        """Stop a producer and its pass, and wait for its thread; a pass it
        started ahead is stopped too."""
        with pr.gate:
            pr.stop.set()
        self._interrupt()
        # Bounded: a read blocked in the transport past its own timeout
        # (a server that accepted the call and then hangs) must not hang the
        # caller; the daemon thread is left behind, with a warning.
        deadline = time.monotonic() + self.timeout
        while pr.thread is not None and pr.thread.is_alive():
            if time.monotonic() > deadline:
                warnings.warn(f"segpipe: read-ahead of {self.where} still blocked after {self.timeout:g} s; left behind",
                              RuntimeWarning, stacklevel=2)
                break
            try:  # unblock a producer waiting for room
                pr.queue.get_nowait()
            except queue.Empty:
                pr.thread.join(0.05)
        ahead = getattr(self, "_ahead", None)
        if ahead is not None and ahead is pr.ahead:
            self._ahead = None
            self._stop(ahead)

    def _pass(self) -> Iterator[Batch]:
        req = self._pass_request()
        start = self._state
        next_epoch = ResumeState(seed=start.seed, epoch=start.epoch + 1)
        if req is None:
            self._drop_ahead()
            self._state = next_epoch
            return
        pr = self._take_ahead(req) or self._start(req, adopted=True)
        # The count every rank is promised (len()), kept whatever is skipped.
        promised = req.limit if self.even_batches and self.world_size > 1 else None
        whole = False
        last: dict | None = None
        try:
            index = 0
            while True:
                try:
                    item = pr.queue.get(timeout=self.timeout + self.timeout_grace)
                except queue.Empty:
                    raise StreamError(
                        f"no batch from {self.where} in {self.timeout:g} s (batch {index} of epoch {start.epoch}): "
                        "the server hangs or is overloaded; raise timeout= if first batches are slow to come"
                    ) from None
                if item is _END:
                    whole = True
                    break
                if isinstance(item, BaseException):
                    raise item
                if promised is not None and index >= promised:
                    # More than promised (a transport ignoring the limit):
                    # cut, or this rank steps once more than the others.
                    log.warning("%s: rank %d: epoch %d gave more than the %d batches promised; cut there",
                                self.where, self.rank, start.epoch, promised)
                    self._stop(pr)
                    break
                batch, st, nbytes = item
                self._state = st
                self._delivered += 1
                self.bytes_received += nbytes
                batch["state"], batch["batch"] = st, index
                index += 1
                last = batch
                yield batch
            # A whole pass: the next one is the next epoch, also when even
            # batches left this rank's last samples unread.
            self._state = next_epoch
            if promised is not None and index < promised:
                if last is None:
                    last = self._first_batch(start)
                pad = promised - index
                self.padded += pad
                log.warning("%s: rank %d: epoch %d ended after %d of the %d batches promised to every rank "
                            "(samples skipped); repeating its last batch %d times",
                            self.where, self.rank, start.epoch, index, promised, pad)
                for _ in range(pad):
                    batch = dict(last)
                    batch["state"], batch["batch"] = next_epoch, index
                    index += 1
                    self._delivered += 1
                    yield batch
        finally:
            if whole:
                if pr.thread is not None:
                    pr.thread.join(self.timeout)
            else:
                self._stop(pr)

    def _first_batch(self, start: ResumeState) -> dict:
        """The first batch of start's epoch for this rank, to pad a pass that
        delivered none (a resumed pass whose samples were all skipped)."""
        self._drop_ahead()  # one pass live at a time
        req = self._request_at(ResumeState(seed=start.seed, epoch=start.epoch))
        if req is not None:
            pr = self._start(replace(req, limit=1))
            try:
                item = pr.queue.get(timeout=self.timeout + self.timeout_grace)
            except queue.Empty:
                item = None
            finally:
                self._stop(pr)
            if isinstance(item, tuple):
                return item[0]
            if isinstance(item, BaseException):
                raise item
        raise StreamError(
            f"{self.where}: rank {self.rank} has no batch of epoch {start.epoch} to give: every sample of "
            "this rank was skipped, and the other ranks would wait for it (even_batches)"
        )

    def _drop_ahead(self) -> None:
        pr, self._ahead = getattr(self, "_ahead", None), None
        if pr is not None:
            self._stop(pr)

    def _produce(self, pr: _Producer) -> None:
        q, stop = pr.queue, pr.stop

        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        req = pr.request
        windowed = req.transport == MASKS_WINDOWED
        imgsz = req.imgsz or 640
        # Windowed masks travel to an accelerator as they came (w*h bytes
        # an instance, not Hp*Wp) and are expanded there; the host only
        # checks the windows.
        on_device = windowed and self.device is not None and self.device.type in self.EXPAND_ON
        try:
            for rb, st in self._open_pass(req, stop):
                if stop.is_set():
                    return
                try:
                    batch: dict[str, Any] = to_tensors(record_arrays(rb, windowed, imgsz, expand=not on_device))
                except (ValueError, TypeError) as e:
                    raise StreamError(f"{self.where}: batch after state {st.to_json()}: {e}") from e
                if self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                if self.device is not None:
                    nb = self.pin_memory and self.device.type == "cuda"
                    batch = {k: v.to(self.device, non_blocking=nb) for k, v in batch.items()}
                if on_device:
                    batch = expand_on_device(batch)
                if not put((batch, st, rb.nbytes)):
                    return
        except BaseException as e:  # handed to the consumer, which raises it
            if not stop.is_set():
                put(e)
            return
        # The pass is read and its loader closed: one pass is live at a
        # time, so the next epoch's may start. The gate orders this with a
        # consumer that stops this pass early (which drops the ahead).
        with pr.gate:
            pr.done = True
            if pr.adopted:
                self._chain(pr)
        put(_END)

    def __getstate__(self) -> dict:
        # A DataLoader worker gets a copy without live connections.
        d = dict(self.__dict__)
        d.pop("_live", None)
        d.pop("_ahead", None)
        return d
