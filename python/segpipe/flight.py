"""FlightBatches: one rank's training batches from `segpipe serve` as tensors.

Each Flight message is one Arrow record of the formats/batch schema (or its
windowed form); the tensors handed out are views of the record's buffers
(``torch.from_numpy`` over numpy views of the Arrow buffers, no copy), except
windowed masks, which are expanded into a fresh stack. Treat them as
read-only: they alias memory that pyarrow received from gRPC; clone before
editing in place.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import torch
import torch.utils.data

from .dist import rank_and_world
from .request import MASKS_WINDOWED, Request, ResumeState
from .stream import Resumable, StreamError
from .windowed import expand_windows, image_bytes

#: Columns before the masks, the same in both transports (formats/batch).
BASE_COLUMNS = (
    "image",
    "image_id",
    "orig_height",
    "orig_width",
    "transform",
    "boxes",
    "classes",
    "iscrowd",
    "boxes_per_image",
)
DENSE_COLUMNS = BASE_COLUMNS + ("masks",)
WINDOWED_COLUMNS = BASE_COLUMNS + ("mask_windows", "mask_data")
META_GRID = b"segpipe.mask_grid"

#: Keys of a batch dict that hold tensors: the columns (images for image),
#: the instance offsets, and the dense masks whatever the transport.
TENSOR_KEYS = ("images",) + BASE_COLUMNS[1:] + ("offsets", "masks")


def _storage(a: pa.Array) -> pa.Array:
    # fixed_shape_tensor is a canonical extension type; a pyarrow that does
    # not know it hands over the storage array, one that does an
    # ExtensionArray around it. The layout is the same.
    return a.storage if isinstance(a, pa.ExtensionArray) else a


def _view(a: pa.Array, dtype: Any, what: str) -> np.ndarray:
    """A numpy view of a primitive array's values, without copying."""
    a = _storage(a)
    if a.null_count:
        raise StreamError(f"column {what} has {a.null_count} nulls")
    v = a.to_numpy(zero_copy_only=True)
    if v.dtype != dtype:
        raise StreamError(f"column {what} holds {v.dtype}, want {np.dtype(dtype)}")
    if not v.flags.aligned:
        v = v.copy()  # torch wants aligned memory; only small columns can be misaligned
    return v


def _tensor_shape(f: pa.Field) -> list[int] | None:
    t = f.type
    shape = getattr(t, "shape", None)
    if shape is not None:
        return list(shape)
    md = f.metadata or {}
    raw = md.get(b"ARROW:extension:metadata")
    if raw:
        try:
            return list(json.loads(raw)["shape"])
        except (ValueError, KeyError, TypeError):
            return None
    return None


def _list_child(col: pa.Array) -> pa.Array:
    """The child values a list column's rows cover (zero-copy slice)."""
    return col.flatten()


def record_arrays(rb: pa.RecordBatch, windowed: bool, imgsz: int) -> dict[str, np.ndarray]:
    """Numpy views of a batch record's columns, checked against the contract.

    Keys as FlightBatches' batches; masks is (sum_N, Hp, Wp) uint8, expanded
    from the windows for a windowed record.
    """
    want = WINDOWED_COLUMNS if windowed else DENSE_COLUMNS
    if tuple(rb.schema.names) != want:
        raise StreamError(f"server sent columns {rb.schema.names}, want {list(want)}")
    n = rb.num_rows
    shape = _tensor_shape(rb.schema.field(0)) or [3, imgsz, imgsz]
    if len(shape) != 3 or shape[0] != 3:
        raise StreamError(f"column image has shape {shape}, want [3, H, W]")
    _, h, w = shape
    out: dict[str, np.ndarray] = {}
    out["images"] = _view(_storage(rb.column(0)).flatten(), np.uint8, "image").reshape(n, 3, h, w)
    out["image_id"] = _view(rb.column(1), np.int64, "image_id")
    out["orig_height"] = _view(rb.column(2), np.int32, "orig_height")
    out["orig_width"] = _view(rb.column(3), np.int32, "orig_width")
    out["transform"] = _view(rb.column(4).flatten(), np.float64, "transform").reshape(n, 6)
    boxes_col = rb.column(5)
    offsets = _view(boxes_col.offsets, np.int32, "boxes offsets")
    if offsets.size != n + 1:
        raise StreamError(f"{offsets.size} box offsets for {n} images")
    sum_n = int(offsets[-1] - offsets[0])
    out["boxes"] = _view(_list_child(boxes_col).flatten(), np.float32, "boxes").reshape(sum_n, 4)
    out["classes"] = _view(_list_child(rb.column(6)), np.int32, "classes")
    out["iscrowd"] = _view(_list_child(rb.column(7)), np.uint8, "iscrowd")
    bpi = _view(rb.column(8), np.int32, "boxes_per_image")
    if out["classes"].size != sum_n or out["iscrowd"].size != sum_n:
        raise StreamError(f"{sum_n} boxes but {out['classes'].size} classes and {out['iscrowd'].size} iscrowd flags")
    if not np.array_equal(np.diff(offsets), bpi):
        raise StreamError("boxes_per_image does not match the list offsets")
    out["boxes_per_image"] = bpi
    out["offsets"] = offsets if offsets[0] == 0 else offsets - offsets[0]
    if not windowed:
        mcol = rb.column(9)
        mshape = _tensor_shape(mcol.type.value_field) if hasattr(mcol.type, "value_field") else None
        hp, wp = mshape if mshape and len(mshape) == 2 else (h // 4, w // 4)
        if not np.array_equal(_view(mcol.offsets, np.int32, "masks offsets"), offsets):
            raise StreamError("masks and boxes do not share their offsets")
        out["masks"] = _view(_storage(_list_child(mcol)).flatten(), np.uint8, "masks").reshape(sum_n, hp, wp)
        return out
    grid = (rb.schema.metadata or {}).get(META_GRID)
    try:
        hp, wp = (int(x) for x in grid.split(b","))
    except (AttributeError, ValueError):
        raise StreamError(f"windowed schema: metadata {META_GRID.decode()} = {grid!r}, want b'Hp,Wp'") from None
    wcol = rb.column(9)
    wins = _view(_list_child(wcol).flatten(), np.int32, "mask_windows")
    if wins.size != 4 * sum_n:
        raise StreamError(f"{wins.size // 4} windows for {sum_n} instances")
    dcol = rb.column(10)
    if dcol.null_count:
        raise StreamError("column mask_data has nulls")
    bufs = dcol.buffers()
    doffs = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=4 * dcol.offset) if n else np.zeros(1, np.int32)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    try:
        out["masks"] = expand_windows(wins, image_bytes(doffs, data), hp, wp)
    except ValueError as e:
        raise StreamError(f"windowed masks: {e}") from None
    return out


def to_tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """torch.from_numpy of every array: tensors that share the memory."""
    with warnings.catch_warnings():
        # The views are read-only (they alias received Arrow buffers); torch
        # warns once per call that it cannot mark a tensor so.
        warnings.simplefilter("ignore", UserWarning)
        return {k: torch.from_numpy(v) for k, v in arrays.items()}


def per_image(batch: dict, key: str = "masks") -> tuple[torch.Tensor, ...]:
    """Split an instance tensor of a batch (masks, boxes, classes, iscrowd) by
    image: views, one per image, in order."""
    return torch.split(batch[key], batch["boxes_per_image"].tolist())


def _app_metadata(chunk: Any) -> bytes | None:
    return chunk.app_metadata.to_pybytes() if chunk.app_metadata is not None else None


def location(addr: str, tls: Any) -> str:
    if "://" in addr:
        return addr
    return ("grpc+tls://" if tls else "grpc://") + addr


_RETRYABLE = (flight.FlightUnavailableError, flight.FlightInternalError)


class FlightBatches(torch.utils.data.IterableDataset):
    """One rank's stream of training batches from a segpipe server.

    Iterating yields dicts of tensors, one per batch:

    - ``images`` uint8 (N, 3, H, W), RGB
    - ``image_id`` int64 (N,), ``orig_height``/``orig_width`` int32 (N,)
    - ``transform`` float64 (N, 6): source (x, y) -> canvas (a*x+b*y+c, d*x+e*y+f)
    - ``boxes`` float32 (sum_N, 4) x1 y1 x2 y2 canvas pixels, ``classes``
      int32 (sum_N,), ``iscrowd`` uint8 (sum_N,)
    - ``boxes_per_image`` int32 (N,), ``offsets`` int32 (N+1,) its prefix sums
    - ``masks`` uint8 (sum_N, Hp, Wp) of {0, 1}, Hp = H/4 (see ``per_image``)
    - ``state`` the ResumeState after this batch, ``batch`` its index

    rank and world_size default to torch.distributed's (see rank_and_world).
    ``start`` resumes from a saved ``state()``. A dropped connection is
    reopened from the last state delivered, up to ``retries`` times in a row;
    answers (bad request, unknown shard set, authentication) fail at once.
    ``device`` moves each batch there (``pin_memory`` first copies it into
    page-locked memory, so that the copy to a CUDA device is asynchronous).

    The stream is one pass over its request (``epochs`` epochs from
    ``start``); construct another with ``start=state()`` to go on. With a
    DataLoader use ``batch_size=None`` and at most one worker: the server
    does the loading, and two workers would read the same stream twice. With
    one worker the stream runs in the worker's copy, so save each batch's
    ``state`` rather than this object's ``state()``.
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
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        retries: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
    ):
        super().__init__()
        r, w = rank_and_world(rank, world_size)
        self.request = Request(
            shards=shards,
            start=ResumeState.coerce(start),
            epochs=epochs,
            close_mosaic=close_mosaic,
            rank=r,
            world_size=w,
            batch_size=batch_size,
            imgsz=imgsz,
            val=val,
            augment=augment,
            masks=masks,
            limit=limit,
        ).validate()
        self.addr = addr
        self._location = location(addr, tls)
        self._tls = tls
        self._headers = [(b"authorization", b"Bearer " + token.encode())] if token else []
        self.device = torch.device(device) if device is not None else None
        self.pin_memory = pin_memory
        self._client: flight.FlightClient | None = None
        self._stream = Resumable(
            self.request,
            self._open,
            _app_metadata,
            retryable=_RETRYABLE,
            failures=(pa.ArrowException, flight.FlightError),
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            where=addr,
        )
        #: Bytes of the Arrow records received so far (all buffers).
        self.bytes_received = 0

    # -- connection ---------------------------------------------------------

    def _options(self) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(headers=self._headers)

    def client(self) -> flight.FlightClient:
        """The Flight client, connected on first use."""
        if self._client is None:
            kw = {}
            if isinstance(self._tls, (str, bytes)):
                pem = self._tls
                if isinstance(pem, str):
                    with open(pem, "rb") as f:
                        pem = f.read()
                kw["tls_root_certs"] = pem
            self._client = flight.FlightClient(self._location, **kw)
        return self._client

    def dataset_info(self) -> dict:
        """GetFlightInfo's description of the shard set: {"images": N,
        "categories": [{"id", "name", ...}, ...]}."""
        req = Request(shards=self.request.shards)
        try:
            info = self.client().get_flight_info(flight.FlightDescriptor.for_command(req.ticket()), self._options())
        except (pa.ArrowException, flight.FlightError) as e:
            raise StreamError(f"flight info for shard set {self.request.shards!r} from {self.addr}: {e}") from e
        raw = getattr(info, "app_metadata", b"")
        if not raw:
            raise StreamError(f"{self.addr} does not describe shard set {self.request.shards!r} (an older server or pyarrow)")
        return json.loads(bytes(raw))

    def _open(self, req: Request):
        reader = self.client().do_get(flight.Ticket(req.ticket()), self._options())
        names = tuple(reader.schema.names)
        want = WINDOWED_COLUMNS if req.transport == MASKS_WINDOWED else DENSE_COLUMNS
        if names != want:
            reader.cancel()
            raise StreamError(f"server sent columns {list(names)}, want {list(want)}")
        return reader

    def close(self) -> None:
        """End the stream (the server stops its loader) and the connection."""
        self._stream.close()
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "FlightBatches":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict:
        # A DataLoader worker gets a copy without the connection.
        d = dict(self.__dict__)
        d["_client"] = None
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._stream._open_reader = self._open  # bound to this copy

    # -- iteration ----------------------------------------------------------

    def state(self) -> ResumeState:
        """The resume state after the last batch delivered (the start before
        the first): pass it as ``start`` to continue exactly there."""
        return self._stream.state

    @property
    def delivered(self) -> int:
        """Number of batches delivered."""
        return self._stream.delivered

    def __iter__(self) -> Iterator[dict]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "FlightBatches in a DataLoader with num_workers > 1 would read the stream once per worker: "
                "use num_workers=0 (or 1) and batch_size=None; the server does the loading"
            )
        return self

    def __next__(self) -> dict:
        chunk = self._stream.next()
        try:
            rb = chunk.data
            arrays = record_arrays(rb, self.request.transport == MASKS_WINDOWED, self.request.imgsz or 640)
        except (StreamError, ValueError, pa.ArrowException) as e:
            raise self._stream.fail(e) from e
        batch: dict[str, Any] = to_tensors(arrays)
        if self.pin_memory:
            batch = {k: v.pin_memory() for k, v in batch.items()}
        if self.device is not None:
            nb = self.pin_memory and self.device.type == "cuda"
            batch = {k: v.to(self.device, non_blocking=nb) for k, v in batch.items()}
        self.bytes_received += rb.nbytes
        batch["state"] = self._stream.commit()
        batch["batch"] = self._stream.delivered - 1
        return batch
