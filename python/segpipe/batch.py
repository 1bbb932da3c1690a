"""One batch record as numpy arrays and tensors: the conversion every
transport shares (Flight from `segpipe serve`, the in-process loader).

A record has the formats/batch schema (dense masks) or its windowed form;
``record_arrays`` checks it against that contract and returns numpy views of
its buffers (no copy), except windowed masks, which are expanded into a
fresh stack; ``numpy_batch`` is the same for a record alone (what
``Loader.record_batches`` yields), reading the layout from its schema, and
needs only numpy and pyarrow; ``to_tensors`` wraps each view with
``torch.from_numpy`` (the ``segpipe[torch]`` extra). The views alias the
record's memory: treat them as read-only, clone before editing in place.
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pyarrow as pa

from . import _torch
from .request import MASK_STRIDE
from .stream import StreamError
from .windowed import check_windows, expand_windows, image_bytes

if TYPE_CHECKING:  # torch is imported by to_tensors only
    import torch


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
#: The column that ends a rect or multi_scale record (formats/batch
#: ColCanvas): each row's live canvas (h, w), int32.
CANVAS_COLUMN = "canvas"
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


def record_arrays(rb: pa.RecordBatch, windowed: bool, imgsz: int, *, expand: bool = True) -> dict[str, np.ndarray]:
    """Numpy views of a batch record's columns, checked against the contract.

    Keys as FlightBatches' batches; masks is (sum_N, Hp, Wp) uint8, expanded
    from the windows for a windowed record. With expand=False a windowed
    record keeps them windowed for a consumer that expands on its device
    (expand_on_device): no ``masks`` key but ``mask_windows`` int32
    (sum_N, 4), ``mask_data`` uint8 (all windows' bytes, checked against
    the windows) and ``mask_shape`` int32 (4,): Hp, Wp and the live
    canvas's mask rows and columns.
    """
    want = WINDOWED_COLUMNS if windowed else DENSE_COLUMNS
    names = tuple(rb.schema.names)
    live = names[-1:] == (CANVAS_COLUMN,)
    if (names[:-1] if live else names) != want:
        raise StreamError(f"server sent columns {rb.schema.names}, want {list(want)} (and {CANVAS_COLUMN!r} last with rect or multi_scale)")
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
        return _live_view(out, rb, live, h, w)
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
        data = image_bytes(doffs, data)
        if not expand:
            check_windows(wins, data.size, hp, wp)
            out["mask_windows"] = wins.reshape(sum_n, 4)
            out["mask_data"] = data
            s = h // hp if hp else MASK_STRIDE
            lh, lw = _live_canvas(rb, live, h, w, s)
            out["mask_shape"] = np.array([hp, wp, lh // s, lw // s], np.int32)
            return _live_images(out, lh, lw)
        out["masks"] = expand_windows(wins, data, hp, wp)
    except ValueError as e:
        raise StreamError(f"windowed masks: {e}") from None
    return _live_view(out, rb, live, h, w)


def expand_on_device(batch: dict) -> dict:
    """A batch of record_arrays(..., expand=False) tensors with its masks
    expanded where its mask data is (expand_windows_torch: one scatter, on
    a GPU a few kernels), cut to the live canvas as _live_view cuts them.
    The windows were checked by record_arrays."""
    from .windowed import expand_windows_torch

    hp, wp, mh, mw = (int(x) for x in batch.pop("mask_shape").tolist())
    masks = expand_windows_torch(batch.pop("mask_windows"), batch.pop("mask_data"), hp, wp, checked=True)
    batch["masks"] = masks[:, :mh, :mw]
    return batch


def _live_view(out: dict[str, np.ndarray], rb: pa.RecordBatch, live: bool, h: int, w: int) -> dict[str, np.ndarray]:
    """A rect or multi_scale batch (a trailing canvas column) cut to its live
    canvas, the batch's own (h, w) at the top left of the stream's canvas:
    views, no copy."""
    if not live:
        return out
    s = h // out["masks"].shape[1] if out["masks"].ndim == 3 and out["masks"].shape[1] else MASK_STRIDE
    lh, lw = _live_canvas(rb, live, h, w, s)
    out["masks"] = out["masks"][:, : lh // s, : lw // s]
    return _live_images(out, lh, lw)


def _live_canvas(rb: pa.RecordBatch, live: bool, h: int, w: int, s: int) -> tuple[int, int]:
    """The batch's live (height, width): its canvas column's, checked to lie
    on the mask grid (stride s) inside the h x w canvas; (h, w) without one."""
    if not live:
        return h, w
    hw = _view(rb.column(rb.num_columns - 1).flatten(), np.int32, CANVAS_COLUMN).reshape(rb.num_rows, 2)
    if hw.size and not (hw == hw[0]).all():
        raise StreamError("the rows of a batch disagree on its live canvas")
    lh, lw = (int(hw[0, 0]), int(hw[0, 1])) if hw.size else (h, w)
    if not (0 < lh <= h and 0 < lw <= w and lh % s == 0 and lw % s == 0):
        raise StreamError(f"live canvas {lh}x{lw} outside the {h}x{w} canvas or off the mask grid")
    return lh, lw


def _live_images(out: dict[str, np.ndarray], lh: int, lw: int) -> dict[str, np.ndarray]:
    out["images"] = out["images"][:, :, :lh, :lw]
    return out


def numpy_batch(rb: pa.RecordBatch) -> dict[str, np.ndarray]:
    """One batch record (from ``Loader.record_batches()``, a Flight stream
    or a ``segpipe dump`` file) as numpy arrays: the keys and dtypes of a
    Batch's tensors (TENSOR_KEYS), checked against the batch contract.

    The arrays are read-only views of the record's Arrow buffers (no copy;
    each keeps its buffer alive, so it may outlive the record; copy one to
    edit it), except the masks of a windowed record, expanded into a fresh
    dense stack as the tensor path does. Dense or windowed is read from the
    record's columns, the image size from its image column's shape. Needs
    no torch.
    """
    windowed = "mask_windows" in rb.schema.names
    shape = _tensor_shape(rb.schema.field(0)) if rb.num_columns else None
    imgsz = shape[1] if shape and len(shape) == 3 else _square_side(rb)
    return record_arrays(rb, windowed, imgsz)


def _square_side(rb: pa.RecordBatch) -> int:
    # An image column without its shape metadata (an extension type a
    # reader dropped): a fixed-size list of 3*S*S bytes is an S x S image.
    size = getattr(_storage(rb.column(0)).type, "list_size", 0) if rb.num_columns else 0
    side = int(round((size // 3) ** 0.5)) if size > 0 else 0
    if side <= 0 or 3 * side * side != size:
        raise StreamError(f"column image: no shape metadata and {size} bytes per image is not a 3 x S x S image")
    return side


class Batch(TypedDict):
    """One batch as FlightBatches and Loader yield it (N images, sum_N
    instances; H = W = imgsz, Hp = H/4). Tensors are on the host unless a
    device was asked for."""

    #: uint8 (N, 3, H, W), RGB.
    images: "torch.Tensor"
    #: int64 (N,): the COCO image ids.
    image_id: "torch.Tensor"
    #: int32 (N,): the source images' sizes.
    orig_height: "torch.Tensor"
    orig_width: "torch.Tensor"
    #: float64 (N, 6): source (x, y) -> canvas (a*x+b*y+c, d*x+e*y+f).
    transform: "torch.Tensor"
    #: float32 (sum_N, 4): x1 y1 x2 y2 in canvas pixels.
    boxes: "torch.Tensor"
    #: int32 (sum_N,): class indices 0..K-1 (the manifest's category order).
    classes: "torch.Tensor"
    #: uint8 (sum_N,): 1 for a crowd region.
    iscrowd: "torch.Tensor"
    #: int32 (N,): instances per image; offsets int32 (N+1,) its prefix sums.
    boxes_per_image: "torch.Tensor"
    offsets: "torch.Tensor"
    #: uint8 (sum_N, Hp, Wp) of {0, 1}, one plane per instance (see per_image).
    masks: "torch.Tensor"
    #: The resume state after this batch (pass it as start, or load it with
    #: load_state_dict, to continue after it).
    state: Any
    #: The batch's index in its epoch pass.
    batch: int


def to_tensors(arrays: dict[str, np.ndarray]) -> "dict[str, torch.Tensor]":
    """torch.from_numpy of every array: tensors that share the memory."""
    torch = _torch.require("tensors from batches (segpipe.batch.to_tensors)")

    with warnings.catch_warnings():
        # The views are read-only (they alias received Arrow buffers); torch
        # warns once per call that it cannot mark a tensor so.
        warnings.simplefilter("ignore", UserWarning)
        return {k: torch.from_numpy(v) for k, v in arrays.items()}


def per_image(batch: dict, key: str = "masks") -> "tuple[torch.Tensor, ...]":
    """Split an instance tensor of a batch (masks, boxes, classes, iscrowd) by
    image: views, one per image, in order."""
    torch = _torch.require("segpipe.batch.per_image")

    return torch.split(batch[key], batch["boxes_per_image"].tolist())


