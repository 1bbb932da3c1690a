"""Epoch passes over a segpipe batch stream, with PyTorch's conventions.

``EpochStream`` is what FlightBatches (and any other transport) share: each
``iter()`` is one epoch pass of this rank's batches, continuing from the
resume state; ``len()`` is the number of batches that pass yields;
``set_epoch``, ``state_dict`` and ``load_state_dict`` behave as a
DistributedSampler's and a stateful DataLoader's do. A background thread
reads and converts batches ahead of the consumer (windowed masks are
expanded there, not on the training thread), so that a batch is ready when
the step asks for it.

A transport implements ``images()`` (the set's image count, for lengths and
even rank splits) and ``_open_pass(request, stop)`` (an iterator of
(record, resume state) for one pass's request), and ``_interrupt()`` (stop a
read in progress from another thread).
"""

from __future__ import annotations

import queue
import threading
import warnings
from dataclasses import replace
from typing import Any, Iterator

import torch
import torch.utils.data

from .batch import Batch, record_arrays, to_tensors
from .request import MASKS_WINDOWED, Request, RequestError, ResumeState, even_batches, rank_batches
from .stream import StreamError

_END = object()


class EpochStream(torch.utils.data.IterableDataset):
    """One rank's batches, an epoch per iteration. See FlightBatches."""

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
        self.device = torch.device(device) if device is not None else None
        if pin_memory and not torch.cuda.is_available():
            # As torch's DataLoader does: pinning needs an accelerator.
            warnings.warn("pin_memory=True but no CUDA device is available: batches are not pinned", stacklevel=3)
            pin_memory = False
        self.pin_memory = pin_memory
        self.prefetch, self.timeout, self.where = prefetch, float(timeout), where
        self._state: ResumeState = request.start
        self._delivered = 0
        #: Bytes of the Arrow records delivered so far (all buffers).
        self.bytes_received = 0

    # -- what a transport provides -------------------------------------------

    def images(self) -> int:
        """Images in the shard set (for len() and even rank splits)."""
        raise NotImplementedError

    def _open_pass(self, req: Request, stop: threading.Event) -> Iterator[tuple[Any, ResumeState]]:
        raise NotImplementedError

    def _interrupt(self) -> None:
        """Unblock a read in progress (called from the consumer's thread)."""

    def close(self) -> None:
        """Stop a pass in progress (its loader or stream ends)."""
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

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                f"{type(self).__name__} in a DataLoader with num_workers > 1 would read the stream once per worker: "
                "use num_workers=0 (or 1) and batch_size=None; segpipe does the loading in its own threads"
            )
        return self._pass()

    def _pass(self) -> Iterator[Batch]:
        req = self._pass_request()
        start = self._state
        next_epoch = ResumeState(seed=start.seed, epoch=start.epoch + 1)
        if req is None:
            self._state = next_epoch
            return
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        t = threading.Thread(target=self._produce, args=(req, q, stop), name="segpipe-prefetch", daemon=True)
        t.start()
        try:
            index = 0
            while True:
                try:
                    item = q.get(timeout=self.timeout)
                except queue.Empty:
                    raise StreamError(
                        f"no batch from {self.where} in {self.timeout:g} s (batch {index} of epoch {start.epoch}): "
                        "the server hangs or is overloaded; raise timeout= if first batches are slow to come"
                    ) from None
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                batch, st, nbytes = item
                self._state = st
                self._delivered += 1
                self.bytes_received += nbytes
                batch["state"], batch["batch"] = st, index
                index += 1
                yield batch
            # A whole pass: the next one is the next epoch, also when even
            # batches left this rank's last samples unread.
            self._state = next_epoch
        finally:
            stop.set()
            self._interrupt()
            while t.is_alive():
                try:  # unblock a producer waiting for room
                    q.get_nowait()
                except queue.Empty:
                    t.join(0.05)

    def _produce(self, req: Request, q: queue.Queue, stop: threading.Event) -> None:
        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        windowed = req.transport == MASKS_WINDOWED
        imgsz = req.imgsz or 640
        try:
            for rb, st in self._open_pass(req, stop):
                if stop.is_set():
                    return
                try:
                    batch: dict[str, Any] = to_tensors(record_arrays(rb, windowed, imgsz))
                except (ValueError, TypeError) as e:
                    raise StreamError(f"{self.where}: batch after state {st.to_json()}: {e}") from e
                if self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                if self.device is not None:
                    nb = self.pin_memory and self.device.type == "cuda"
                    batch = {k: v.to(self.device, non_blocking=nb) for k, v in batch.items()}
                if not put((batch, st, rb.nbytes)):
                    return
            put(_END)
        except BaseException as e:  # handed to the consumer, which raises it
            if not stop.is_set():
                put(e)

    def __getstate__(self) -> dict:
        # A DataLoader worker gets a copy without live connections.
        d = dict(self.__dict__)
        d.pop("_live", None)
        return d
