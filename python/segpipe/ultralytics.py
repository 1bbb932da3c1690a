"""Train Ultralytics segmentation models on batches from `segpipe serve`.

    from ultralytics import YOLO
    from segpipe.ultralytics import SegpipeSegmentationTrainer

    YOLO("yolo26n-seg.yaml").train(
        trainer=SegpipeSegmentationTrainer,
        data="segpipe://127.0.0.1:8815/coco/train2017?val=coco/val2017",
        epochs=100, imgsz=640, batch=32)

Only the data source changes: the trainer is Ultralytics' SegmentationTrainer
with get_dataset (class names from the server), get_dataloader (one stream per
epoch and rank) and preprocess_batch (semantic masks made on the device)
replaced. Batches are the dicts v8SegmentationLoss and the segmentation
validator read: ``img`` uint8 (N,3,H,W) RGB, ``batch_idx``, ``cls`` (n,1),
``bboxes`` normalised xywh, ``masks``, ``sem_masks`` (N,Hp,Wp),
``ori_shape``, ``ratio_pad``, ``resized_shape``, ``im_file``. ``masks`` is
as Ultralytics' Format makes it for the run's overlap_mask: with False one
plane per instance (n,Hp,Wp); with True (Ultralytics' default) one index map
per image (N,Hp,Wp), each image's instances sorted by mask area descending
(ties in stream order) and a pixel holding i+1 for the smallest instance
covering it, uint8, or int32 when an image has more than 255 instances
(overlap_masks). The maps are made from the stream's per-instance masks with
torch on the batch's device, in preprocess_batch (training) and the
validator's preprocess.

Supported Ultralytics releases: ULTRALYTICS_REQUIREMENT (8.4.2, the floor, and
the newest 8.4.x are tested; check_version tells whether the installed one is
in the range). Augmentation runs in the server: every setting of segpipe's
augmentation table (segpipe._augment, generated from the Go table) that is
also an Ultralytics hyper-parameter is passed on under its name (augment_settings). The dataset options go into the stream's request and
are applied by the loader, with Ultralytics' meaning (dataset_settings):
``classes`` keeps only those classes' instances (their indices unchanged;
an image left with none stays, as a background image), ``single_cls`` makes
every class 0 (names become {0: "item"}), ``fraction`` streams the first
round(images * fraction) images of the shard set in manifest order (an int
above 1 is an image count; a list gives train, val; a scalar applies to
train only, as in Ultralytics, which takes the first files of its sorted
list), and ``cache`` is accepted and does nothing (the loader caches decoded
images already). The other Ultralytics settings with no segpipe counterpart
(unsupported_settings) are refused at a non-default value rather than
silently ignored, as is batch < 1 (AutoBatch).

Masks follow the server's ``mask_rule``: ``exact`` by default (a cell is on
when its centre is inside the polygon), or ``ultralytics`` (polygon2mask cell
for cell) when the data URL asks (``...?mask_rule=ultralytics``). The default
is the one that trained the better model in scripts/ultralytics-map.py
(BENCHMARKS.md: three seeds on the quickstart's set, mask mAP50-95 0.920 ± 0.007
with exact, 0.881 ± 0.006 with the ultralytics rule, 0.863 ± 0.008 with
Ultralytics' own loader, better at every object size). Validation streams use
the same rule and rectangular batches, as Ultralytics validates.

Distributed training: each process streams its share of an epoch as global
rank r of the world (torch.distributed's rank and size, else RANK and
WORLD_SIZE), whatever LOCAL_RANK Ultralytics passes; every rank's training
epoch is cut to the batch count of the rank with the fewest (DDP steps all
ranks together and hangs when one runs out first). Validation is split across
the ranks as Ultralytics splits its own (every rank validates and the
validator gathers the statistics on rank 0) when the installed validator
gathers, else rank 0 reads the whole set.
"""

from __future__ import annotations

import functools
import os
import re
from copy import copy
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

try:  # the segpipe[ultralytics] extra (it brings torch)
    import torch
    from ultralytics import __version__ as _ul_version
    from ultralytics.cfg import DEFAULT_CFG_DICT
    from ultralytics.engine.validator import BaseValidator
    from ultralytics.models.yolo.segment import SegmentationTrainer, SegmentationValidator
    from ultralytics.utils import LOGGER
except ModuleNotFoundError as _e:
    if _e.name not in ("torch", "ultralytics"):
        raise
    from ._torch import ULTRALYTICS_EXTRA, missing

    raise missing("segpipe.ultralytics", _e.name, ULTRALYTICS_EXTRA) from _e

from ._augment import AUGMENT_TYPES
from .dist import rank_and_world
from .request import Request, RequestError, ResumeState, Source, even_batches, fraction_rows, rank_batches

#: The Ultralytics releases this adapter supports, as a pip requirement.
ULTRALYTICS_REQUIREMENT = "ultralytics>=8.4.2,<8.5"
#: The same range: lowest release supported, first release not supported.
ULTRALYTICS_MIN = (8, 4, 2)
ULTRALYTICS_BELOW = (8, 5)
#: The range as a version specifier (kept under its old name for callers).
ULTRALYTICS_VERSION = ">=8.4.2,<8.5"

# Ultralytics settings segpipe may have no counterpart for, and the value that
# means "off" (a setting this Ultralytics release does not have reads as off).
# Those the augmentation table (AUGMENT_TYPES) has are passed on instead
# (unsupported_settings): a setting added to the table needs no change here.
_NO_COUNTERPART = {
    "flipud": 0.0,
    "mixup": 0.0,
    "cutmix": 0.0,
    "bgr": 0.0,
    "cls_pw": 0.0,  # class weights count the labels of Ultralytics' own dataset
    "augmentations": None,  # albumentations transforms run in Ultralytics' dataset
    "save_txt": False,  # the validator names label files after image files, which a stream has none of
}

# The settings Ultralytics' close_mosaic (YOLODataset) sets to 0 for the
# last close_mosaic epochs.
CLOSED_WITH_MOSAIC = ("mosaic", "copy_paste", "mixup", "cutmix")

# Ultralytics' dataset options the loader applies (dataset_settings), and
# cache, which it accepts and ignores.
DATASET_SETTINGS = ("classes", "single_cls", "fraction")

# The Python type of each kind of setting in AUGMENT_TYPES.
_KIND_TYPES = {"float": float, "uint8": int, "bool": bool, "enum": str}


def augment_settings(args: Any) -> dict:
    """The server's augmentation settings for Ultralytics arguments ``args``:
    each setting of segpipe's table (AUGMENT_TYPES) that is also a setting of
    the installed Ultralytics (DEFAULT_CFG_DICT), same name, as the table's
    type. The table's settings Ultralytics lacks (fill, the candidate rule,
    keep_crowd) keep the server's defaults. Ultralytics' ``scale`` may be a
    (min, max) range as well as a gain: the table holds a range as
    scale_min and scale_max."""
    scale = getattr(args, "scale", None)
    ranged = isinstance(scale, (list, tuple))
    out = {
        k: _KIND_TYPES[kind](getattr(args, k))
        for k, kind in AUGMENT_TYPES.items()
        if k in DEFAULT_CFG_DICT and not (ranged and k == "scale")
    }
    if ranged:
        if len(scale) != 2:
            raise RequestError(f"scale={scale!r}: want a gain or a (min, max) range")
        out["scale_min"], out["scale_max"] = (float(v) for v in scale)
    return out


def unsupported_settings() -> dict:
    """The Ultralytics settings segpipe has no counterpart for, each with its
    "off" value: the trainer refuses any other value. Settings the installed
    Ultralytics does not have are left out (it refuses them itself)."""
    return {k: off for k, off in _NO_COUNTERPART.items() if k not in AUGMENT_TYPES and k in DEFAULT_CFG_DICT}


def split_fraction(fraction: Any, split: str) -> float | int:
    """Ultralytics' fraction for a split (its get_split_fraction): a list is
    [train, val, test] (missing entries 1.0); a scalar applies to train only;
    an int above 1 is an image count, a float a share."""
    if isinstance(fraction, (list, tuple)):
        i = ("train", "val", "test").index(split)
        fraction = fraction[i] if i < len(fraction) else 1.0
    elif split != "train":
        fraction = 1.0
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or fraction < 0:
        raise RequestError(f"fraction={fraction!r}: want a share in (0, 1], an image count or a list of them")
    if fraction == 0 and split in ("train", "val"):
        raise RequestError(f"fraction 0 for {split}: it must select at least one image")
    return float(fraction) if fraction in (0, 1) else fraction


def dataset_settings(args: Any, split: str, images: int) -> dict:
    """The request fields (segpipe.request.Request) of Ultralytics arguments
    ``args`` for ``split`` of a set of ``images`` images: classes (an int or
    a list, as Ultralytics takes it), single_cls, and fraction as the share
    that keeps the images Ultralytics' would (fraction_rows)."""
    out: dict = {}
    classes = getattr(args, "classes", None)
    if classes is not None:
        cl = [classes] if isinstance(classes, int) and not isinstance(classes, bool) else classes
        try:
            out["classes"] = tuple(int(c) for c in cl if not isinstance(c, bool) and int(c) == c)
        except (TypeError, ValueError):
            raise RequestError(f"classes={classes!r}: want a class index or a list of them") from None
        if len(out["classes"]) != len(cl) or any(c < 0 for c in out["classes"]):
            raise RequestError(f"classes={classes!r}: want class indices, at least 0")
    if getattr(args, "single_cls", False):
        out["single_cls"] = True
    f = split_fraction(getattr(args, "fraction", 1.0), split)
    if isinstance(f, int) and not isinstance(f, bool):  # an image count
        f = 1.0 if f >= images else f / images  # fraction_rows(images, f / images) == f
    if f < 1:
        out["fraction"] = float(f)
    return out


def version_tuple(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "8.4.190" ->
    (8, 4, 190), "8.5.0rc1" -> (8, 5, 0)."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(version))
    if not m:
        raise ValueError(f"version {version!r} has no numeric release")
    return tuple(int(x) for x in m.group(1).split("."))


def version_supported(version: str) -> bool:
    """Whether an Ultralytics version is in ULTRALYTICS_REQUIREMENT's range."""
    v = version_tuple(version)
    return ULTRALYTICS_MIN <= v + (0,) * (len(ULTRALYTICS_MIN) - len(v)) and v < ULTRALYTICS_BELOW


def check_version(version: str | None = None) -> str | None:
    """A warning when the installed Ultralytics (or ``version``) is outside the
    supported range, else None."""
    v = _ul_version if version is None else version
    try:
        ok = version_supported(v)
    except ValueError:
        ok = False
    if ok:
        return None
    return f"segpipe.ultralytics supports {ULTRALYTICS_REQUIREMENT}; this is Ultralytics {v}"


def validator_gathers(validator_class: type = SegmentationValidator) -> bool:
    """Whether the validator merges the statistics of all DDP ranks on rank 0
    (overrides BaseValidator.gather_stats, which does nothing): then every rank
    validates its share of the val set, else rank 0 validates all of it."""
    return getattr(validator_class, "gather_stats", None) is not getattr(BaseValidator, "gather_stats", None)


def stream_rank(local_rank: int) -> tuple[int, int]:
    """(rank, world_size) of the stream a process reads, given the rank
    Ultralytics passes to get_dataloader: -1 (a loader that is not split, as
    in single-process training) is rank 0 of 1; otherwise the global rank and
    world size (torch.distributed's when its group is up, else RANK and
    WORLD_SIZE), not the local rank, which repeats on every node."""
    if local_rank < 0:
        return 0, 1
    return rank_and_world()


#: sem_masks rules of Ultralytics' Format with mask_overlap=False: each pixel
#: takes the largest class index of the instances covering it (8.4.2), or the
#: class of the smallest covering instance, the first one among equals (the
#: rule of mask_overlap=True, used by later 8.4 releases).
SEM_MAX_CLASS = "max_class"
SEM_SMALLEST_INSTANCE = "smallest_instance"


@functools.lru_cache(maxsize=1)
def semantic_rule() -> str:
    """The sem_masks rule of the installed Ultralytics, read off its own
    Format: a small square of class 1 inside a large one of class 2 gives
    the inner pixels 2 under SEM_MAX_CLASS and 1 under SEM_SMALLEST_INSTANCE."""
    import numpy as np
    from ultralytics.data.augment import Format
    from ultralytics.utils.instance import Instances

    big, small = (0.0, 0.0, 32.0, 32.0), (8.0, 8.0, 24.0, 24.0)
    boxes = np.array([big, small], dtype=np.float32)
    segs = np.array([[[x0, y0], [x1, y0], [x1, y1], [x0, y1]] for x0, y0, x1, y1 in (big, small)], dtype=np.float32)
    fmt = Format(bbox_format="xywh", normalize=True, return_mask=True, mask_ratio=4, mask_overlap=False, batch_idx=True)
    out = fmt(
        {
            "img": np.zeros((32, 32, 3), dtype=np.uint8),
            "cls": np.array([[2.0], [1.0]], dtype=np.float32),
            "instances": Instances(boxes, segments=segs, bbox_format="xyxy", normalized=False),
        }
    )
    inner = float(out["sem_masks"][4, 4])
    if inner == 2.0:
        return SEM_MAX_CLASS
    if inner == 1.0:
        return SEM_SMALLEST_INSTANCE
    raise RuntimeError(f"Ultralytics {_ul_version} Format gives sem_masks {inner} where this adapter expects 1 or 2")


def semantic_masks(
    masks: torch.Tensor, cls: torch.Tensor, batch_idx: torch.Tensor, n: int, rule: str | None = None
) -> torch.Tensor:
    """Per image the class each pixel's instances give it, float (N, Hp, Wp),
    by ``rule`` (default: the installed Ultralytics' semantic_rule()): what
    Ultralytics' Format gives YOLO26's semantic head with overlap_mask=False
    (uncovered pixels and class 0 are both 0, as there)."""
    rule = rule or semantic_rule()
    hp, wp = masks.shape[-2:]
    p, m = hp * wp, masks.shape[0]
    sem = torch.zeros((n, p), dtype=torch.float32, device=masks.device)
    if not m:
        return sem.reshape(n, hp, wp)
    flat = masks.reshape(m, p)
    idx = batch_idx.reshape(-1, 1).long().expand(-1, p)
    if rule == SEM_MAX_CLASS:
        vals = flat.to(torch.float32) * cls.reshape(-1, 1).to(torch.float32)
        sem.scatter_reduce_(0, idx, vals, reduce="amax", include_self=True)
        return sem.reshape(n, hp, wp)
    if rule != SEM_SMALLEST_INSTANCE:
        raise ValueError(f"semantic rule {rule!r}: want {SEM_MAX_CLASS!r} or {SEM_SMALLEST_INSTANCE!r}")
    # Key area*m + j orders the instances by area, then by index; the
    # smallest key among an image's covering instances wins the pixel.
    area = flat.sum(1, dtype=torch.int64)
    none = (int(area.max()) + 1) * m  # above every key
    key = area * m + torch.arange(m, device=masks.device)
    keys = torch.where(flat.bool(), key[:, None], torch.full_like(key[:, None], none))
    best = torch.full((n, p), none, dtype=torch.int64, device=masks.device)
    best.scatter_reduce_(0, idx, keys, reduce="amin", include_self=True)
    covered = best < none
    winner = torch.where(covered, best % m, torch.zeros_like(best))
    sem = torch.where(covered, cls.reshape(-1).to(torch.float32)[winner], sem)
    return sem.reshape(n, hp, wp)


def overlap_masks(masks: torch.Tensor, batch_idx: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ultralytics' overlap target (polygons2masks_overlap) of per-instance
    masks (m, Hp, Wp) of ``n`` images, on their device: (maps, order).

    order sorts the instances by image, then by mask area descending (an
    instance whose mask is empty first, as Ultralytics' unsigned -area puts
    it), then by their index (numpy's argsort in Ultralytics leaves ties in
    an unspecified order; here they keep the stream's). maps (n, Hp, Wp) holds
    at each pixel k+1 for the image's instance k in that order with the
    largest k covering it (the smallest such instance), 0 where none does:
    uint8, or int32 when an image has more than 255 instances, as
    Ultralytics' Format gives them (and without the uint8 overflow its
    older sum had past 128 overlapping instances)."""
    hp, wp = masks.shape[-2:]
    m, p = masks.shape[0], hp * wp
    dev = masks.device
    bi = batch_idx.reshape(-1).long().to(dev)
    counts = torch.bincount(bi, minlength=n) if m else torch.zeros(n, dtype=torch.int64, device=dev)
    wide = m > 0 and int(counts.max()) > 255
    if not m:
        return torch.zeros((n, hp, wp), dtype=torch.uint8, device=dev), torch.zeros(0, dtype=torch.int64, device=dev)
    area = masks.reshape(m, p).sum(1, dtype=torch.int64)
    # Ultralytics sorts by -area over unsigned areas (numpy's sum of uint8
    # masks), where -0 stays 0: an instance with an empty mask comes first.
    key = torch.where(area > 0, -area, torch.full_like(area, -(1 << 62)))
    by_area = torch.sort(key, stable=True).indices
    order = by_area[torch.sort(bi[by_area], stable=True).indices]
    sbi = bi[order]
    first = torch.cumsum(counts, 0) - counts
    label = torch.arange(1, m + 1, device=dev) - first[sbi]  # k+1 within the image
    vals = masks[order].reshape(m, p).to(torch.int32) * label.to(torch.int32)[:, None]
    maps = torch.zeros((n, p), dtype=torch.int32, device=dev)
    maps.scatter_reduce_(0, sbi[:, None].expand(m, p), vals, reduce="amax", include_self=True)
    return maps.reshape(n, hp, wp).to(torch.int32 if wide else torch.uint8), order


def overlap_semantic_masks(maps: torch.Tensor, cls: torch.Tensor, batch_idx: torch.Tensor) -> torch.Tensor:
    """sem_masks of an overlap batch as Ultralytics' Format makes them with
    mask_overlap=True: per pixel the class of the instance its map names,
    cls of the image's instances in map order (cls[map - 1], so an
    uncovered pixel takes the image's last instance's class, which the loss
    masks out), 0 for an image without instances; float (N, Hp, Wp)."""
    n = maps.shape[0]
    flat = cls.reshape(-1).to(torch.float32).to(maps.device)
    if not flat.numel():
        return torch.zeros(maps.shape, dtype=torch.float32, device=maps.device)
    counts = torch.bincount(batch_idx.reshape(-1).long().to(maps.device), minlength=n)
    first = (torch.cumsum(counts, 0) - counts)[:, None, None]
    v = maps.long()
    g = torch.where(v > 0, first + v - 1, first + counts[:, None, None] - 1).clamp_(0, flat.numel() - 1)
    return torch.where(counts[:, None, None] > 0, flat[g], torch.zeros((), device=maps.device))


def to_overlap(batch: dict) -> dict:
    """``batch`` (per-instance masks) in Ultralytics' overlap_mask=True
    form: masks the per-image index maps (overlap_masks), batch_idx, cls and
    bboxes reordered to match them. Returns the same dict."""
    n = batch["img"].shape[0]
    maps, order = overlap_masks(batch["masks"], batch["batch_idx"], n)
    for k in ("batch_idx", "cls", "bboxes"):
        batch[k] = batch[k][order.to(batch[k].device)]
    batch["masks"] = maps
    return batch


def ultralytics_batch(b: dict, *, im_prefix: str = "", semantic: bool = True) -> dict:
    """The Ultralytics batch dict of a FlightBatches batch (tensors stay on
    their device; images stay uint8 for preprocess_batch to scale).

    Crowd instances (iscrowd 1) are dropped: Ultralytics has no ignore
    regions, and its COCO converter drops them too."""
    images = b["images"]
    n, _, h, w = images.shape
    bpi = b["boxes_per_image"].to(torch.int64)
    batch_idx = torch.repeat_interleave(torch.arange(n, device=bpi.device), bpi)
    keep = b["iscrowd"] == 0
    boxes = b["boxes"]
    masks = b["masks"]
    cls = b["classes"]
    if not bool(keep.all()):
        batch_idx, boxes, masks, cls = batch_idx[keep], boxes[keep], masks[keep], cls[keep]
    scale = torch.tensor([w, h, w, h], dtype=torch.float32, device=boxes.device)
    xywh = torch.stack(
        ((boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2, boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]),
        dim=1,
    ) / scale
    t = b["transform"].tolist()
    ids = b["image_id"].tolist()
    out = {
        "img": images,
        "batch_idx": batch_idx.to(torch.float32),
        "cls": cls.to(torch.float32).reshape(-1, 1),
        "bboxes": xywh,
        "masks": masks,
        "ori_shape": tuple(zip(b["orig_height"].tolist(), b["orig_width"].tolist())),
        # Letterbox (val): transform = [r 0 pad_x 0 r pad_y]. For a mosaic it
        # is the first tile's transform, which no training code reads.
        "ratio_pad": tuple(((m[4], m[0]), (m[2], m[5])) for m in t),
        "resized_shape": tuple((h, w) for _ in range(n)),
        "im_file": tuple(f"{im_prefix}{i}" for i in ids),
    }
    if semantic:
        out["sem_masks"] = semantic_masks(out["masks"], out["cls"], out["batch_idx"], n)
    return out


@dataclass
class StreamRecord:
    """One stream a SegpipeLoader opened: the request (its ticket is what the
    server got) and what it delivered."""

    request: Request
    batches: int = 0
    images: int = 0


def _rank_samples(images: int, rank: int, world_size: int) -> int:
    """Samples rank takes from an epoch: positions rank, rank+world, ... (pipeline/order)."""
    return 0 if rank >= images else (images - rank + world_size - 1) // world_size


class _Sampler:
    """The loader's sampler as the trainer reads it: len() is the samples this
    rank streams in an epoch (the trainer derives the last batch's size from
    it), set_epoch is recorded (the epoch each stream starts at comes from the
    trainer's epoch)."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self.epoch = 0

    def __len__(self) -> int:
        return self.samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class _Dataset:
    """The loader's dataset as the trainer sees it: the number of images of
    the whole set (all ranks) and the close_mosaic switch (the server does
    the rest). ``labels`` is empty: the labels live in the server's shards."""

    def __init__(self, images: int, loader: "SegpipeLoader") -> None:
        self.images = images
        self.loader = loader
        self.labels: list = []

    def __len__(self) -> int:
        return self.images

    @property
    def mosaic(self) -> bool:
        return not self.loader.mosaic_closed and self.loader.augment.get("mosaic", 1.0) > 0

    @mosaic.setter
    def mosaic(self, on: bool) -> None:
        if not on:
            self.loader.mosaic_closed = True

    def close_mosaic(self, hyp: Any) -> None:
        self.loader.mosaic_closed = True


class SegpipeLoader:
    """A DataLoader stand-in: each iteration is one epoch of this rank's
    batches, one stream from the server, started at (seed, epoch, 0).

    epoch_fn tells the epoch being iterated (the trainer's self.epoch), so
    that resuming a run resumes the server's order and augmentation too.

    len() is the number of batches an iteration yields: this rank's share of
    the epoch, cut to ``limit`` batches when limit is set (the trainer sets
    it so that every DDP rank steps the same number of times). An iteration
    that ends with fewer batches raises StreamError. ``idle`` makes a loader
    that yields nothing (a rank that does not validate).

    ``streams`` records every stream opened (its Request and the batches and
    images delivered); ``batches_streamed`` is their total.
    """

    num_workers = 0
    drop_last = False  # the last, possibly short, batch of a rank is served

    def __init__(
        self,
        source: Source,
        shards: str,
        *,
        images: int,
        batch_size: int,
        imgsz: int,
        rank: int,
        world_size: int,
        seed: int,
        val: bool,
        augment: dict,
        epoch_fn: Callable[[], int],
        token: str | None = None,
        limit: int = 0,
        idle: bool = False,
        dataset: dict | None = None,
        rect: bool = False,
    ) -> None:
        if limit < 0:
            raise RequestError(f"limit {limit}: want 0 (none) or a batch count")
        self.source, self.shards = source, shards
        self.dataset = _Dataset(images, self)
        self.batch_size, self.imgsz = batch_size, imgsz
        self.rank, self.world_size = rank, world_size
        self.seed, self.val, self.augment = seed, val, dict(augment)
        self.epoch_fn = epoch_fn
        self.token = token
        self.limit, self.idle = limit, idle
        self.dataset_options = dict(dataset or {})
        self.rect = rect
        self.mosaic_closed = False
        self.last_state: ResumeState | None = None
        self.streams: list[StreamRecord] = []
        self._open: Any = None
        samples = 0 if idle else _rank_samples(images, rank, world_size)
        if limit:
            samples = min(samples, limit * batch_size)
        self.sampler = _Sampler(samples)

    def __len__(self) -> int:
        if self.idle:
            return 0
        n = rank_batches(self.dataset.images, self.batch_size, self.rank, self.world_size)
        return min(n, self.limit) if self.limit else n

    def __bool__(self) -> bool:
        # A loader that yields nothing is still this validator's loader
        # (Ultralytics builds its own when the one it holds is falsy).
        return True

    @property
    def batches_streamed(self) -> int:
        """Batches delivered by all the streams so far."""
        return sum(r.batches for r in self.streams)

    def reset(self) -> None:
        """Nothing to rebuild: the next epoch's stream reads mosaic_closed."""

    def close(self) -> None:
        """End the stream in progress, if any (the trainer calls this when done)."""
        fb, self._open = self._open, None
        if fb is not None and hasattr(fb, "close"):
            fb.close()

    def stream(self, epoch: int):
        """The FlightBatches of one epoch."""
        from .flight import FlightBatches  # pyarrow only where a stream is opened

        aug = dict(self.augment)
        if self.mosaic_closed:
            # What Ultralytics' close_mosaic turns off with mosaic.
            aug.update({k: 0.0 for k in CLOSED_WITH_MOSAIC if k in aug or k == "mosaic"})
        fb = FlightBatches(
            self.source.addr,
            self.shards,
            rank=self.rank,
            world_size=self.world_size,
            batch_size=self.batch_size,
            imgsz=self.imgsz,
            masks=self.source.masks,
            start=ResumeState(seed=self.seed, epoch=0 if self.val else epoch),
            epochs=0,
            val=self.val,
            # Validation takes no augmentation, but its masks follow the
            # run's mask rule (the validator scores against them).
            augment=({"mask_rule": aug["mask_rule"]} if "mask_rule" in aug else None) if self.val else aug,
            # Ultralytics validates on rectangular batches (its trainer
            # builds the val dataset with rect=True); rect=True in its
            # arguments makes the training batches rectangular too.
            rect=self.val or self.rect,
            limit=self.limit,
            even_batches=False,  # the trainer's limit already evens the ranks
            token=self.token,
            tls=self.source.tls,
        )
        if self.dataset_options:
            # The stream reads its request when it opens, at the first batch.
            fb.request = replace(fb.request, **self.dataset_options).validate()
        return fb

    def __iter__(self) -> Iterator[dict]:
        # A generator: the trainer calls iter() twice per epoch (enumerate
        # before and after its progress bar) and reads only the second; the
        # stream opens at the first batch asked for, after close_mosaic.
        if self.idle:
            return
        fb = self.stream(self.epoch_fn())
        rec = StreamRecord(fb.request)
        self.streams.append(rec)
        self._open = fb
        prefix = f"{Source.SCHEME}{self.source.addr}/{self.shards}/"
        try:
            for b in fb:
                self.last_state = b["state"]
                rec.batches += 1
                rec.images += int(b["images"].shape[0])
                yield ultralytics_batch(b, im_prefix=prefix, semantic=False)
        finally:
            if self._open is fb:
                self._open = None
            fb.close()
        if rec.batches != len(self):
            from .stream import StreamError

            raise StreamError(
                f"stream of {self.shards!r} (rank {self.rank} of {self.world_size}) ended after {rec.batches} batches, "
                f"want {len(self)}: did the shard set change since the trainer read its size?"
            )


class SegpipeSegmentationValidator(SegmentationValidator):
    """Ultralytics' SegmentationValidator with the data dict of the trainer.

    During training the validator takes the trainer's data; the final
    validation of best.pt runs it stand-alone, where Ultralytics reads the
    data dict from a dataset YAML, which a segpipe source does not have: the
    trainer's dict is handed over for that one lookup."""

    segpipe_data: dict | None = None

    def preprocess(self, batch: dict) -> dict:
        """Ultralytics' preprocess, the masks first made the overlap maps
        (to_overlap, on the device) when overlap_mask is set: a segpipe
        loader's batches always carry one plane per instance."""
        if self.args.overlap_mask:
            for k in ("masks", "batch_idx", "cls", "bboxes"):
                batch[k] = batch[k].to(self.device)
            to_overlap(batch)
        return super().preprocess(batch)

    def __call__(self, trainer: Any = None, model: Any = None, **kwargs: Any):
        if trainer is not None or self.segpipe_data is None:
            return super().__call__(trainer, model, **kwargs)
        import ultralytics.engine.validator as base

        data, lookup = self.args.data, base.check_det_dataset
        base.check_det_dataset = lambda *_a, **_k: self.segpipe_data
        self.args.data = "segpipe.yaml"  # routes the stand-alone path to the lookup above
        try:
            return super().__call__(trainer, model, **kwargs)
        finally:
            base.check_det_dataset, self.args.data = lookup, data


class SegpipeSegmentationTrainer(SegmentationTrainer):
    """Ultralytics' SegmentationTrainer fed by a segpipe server: pass it as
    ``trainer=`` with ``data="segpipe://HOST:PORT/TRAIN?val=VAL"`` (see
    Source; the token comes from SEGPIPE_TOKEN)."""

    #: The loader get_dataloader builds.
    loader_class = SegpipeLoader

    def __init__(self, cfg: Any = None, overrides: dict | None = None, _callbacks: Any = None):
        overrides = dict(overrides or {})
        if overrides.get("mask_ratio", 4) != 4:
            raise RequestError(f"mask_ratio {overrides['mask_ratio']}: segpipe serves masks at stride 4")
        warn = check_version()
        if warn:
            LOGGER.warning(warn)
        if cfg is None:
            super().__init__(overrides=overrides, _callbacks=_callbacks)
        else:
            super().__init__(cfg, overrides, _callbacks)

    def check_settings(self) -> None:
        """Refuse the settings a segpipe source cannot honour (before the
        server is asked anything)."""
        b = self.args.batch
        if isinstance(b, bool) or not isinstance(b, (int, float)) or b < 1 or b != int(b):
            raise RequestError(
                f"batch={b!r}: AutoBatch (batch -1 or a fraction of the GPU memory) sizes the batch on Ultralytics' "
                "own dataset, which a segpipe source does not have; give a whole number of images (e.g. batch=16)"
            )
        for k, off in unsupported_settings().items():
            v = getattr(self.args, k, off)
            if v != off:
                raise RequestError(f"{k}={v!r} has no segpipe counterpart; leave it at {off!r}")
        cache = getattr(self.args, "cache", False)
        if cache not in (False, None, "False", "false"):
            LOGGER.info(f"segpipe: cache={cache!r} does nothing here (the loader caches decoded images already)")
        for split in ("train", "val"):
            dataset_settings(self.args, split, 1)  # a bad classes or fraction fails before the server is asked

    def get_dataset(self) -> dict:
        """The data dict from the server's description of the shard sets."""
        self.check_settings()
        self.segpipe_source = Source.parse(str(self.args.data))
        info = self.dataset_info(self.segpipe_source.train)
        val_info = info
        if self.segpipe_source.val != self.segpipe_source.train:
            val_info = self.dataset_info(self.segpipe_source.val)
        cats = sorted(info.get("categories") or [], key=lambda c: c["index"])
        if not cats:
            raise RequestError(f"shard set {self.segpipe_source.train!r} has no category table (convert it with a manifest)")
        names = {int(c["index"]): c["name"] for c in cats}
        if sorted(names) != list(range(len(names))):
            raise RequestError(f"shard set {self.segpipe_source.train!r}: class indices {sorted(names)} are not 0..K-1")
        self.segpipe_options = {}
        self.segpipe_images = {}
        for split, n in (("train", int(info["images"])), ("val", int(val_info["images"]))):
            self.segpipe_options[split] = dataset_settings(self.args, split, n)
            self.segpipe_images[split] = fraction_rows(n, self.segpipe_options[split].get("fraction", 0.0))
        if self.args.single_cls:
            LOGGER.info("segpipe: single_cls, one class named 'item' (as Ultralytics names it)")
            names = {0: "item"}
        return {
            "train": self.segpipe_source.train,
            "val": self.segpipe_source.val,
            "nc": len(names),
            "names": names,
            "channels": 3,
        }

    def get_dataloader(self, dataset_path: str, batch_size: int = 16, rank: int = 0, mode: str = "train"):
        """One SegpipeLoader for this process: ``rank`` is Ultralytics' local
        rank and only says whether the loader is split (-1: not); the stream
        takes the global rank (stream_rank)."""
        assert mode in {"train", "val"}, f"Mode must be 'train' or 'val', not {mode}."
        r, world = stream_rank(rank)
        images = self.segpipe_images[mode]
        limit, idle = 0, False
        if world > 1 and mode == "train":
            # Every rank stops at the batch count of the rank with the fewest
            # (the last one): DDP waits for all ranks at every step.
            limit = even_batches(images, batch_size, world)
            if limit == 0:
                raise RequestError(
                    f"shard set {dataset_path!r} has {images} images for {world} ranks: some ranks would get no batch"
                )
        elif world > 1 and not validator_gathers():
            r, world, idle = 0, 1, r != 0
        aug = augment_settings(self.args)
        if self.segpipe_source.mask_rule:
            aug["mask_rule"] = self.segpipe_source.mask_rule
        return self.loader_class(
            self.segpipe_source,
            dataset_path,
            images=images,
            batch_size=batch_size,
            imgsz=int(self.args.imgsz),
            rank=r,
            world_size=world,
            seed=int(self.args.seed),
            val=mode == "val",
            augment=aug,
            epoch_fn=lambda: int(getattr(self, "epoch", 0) or 0),
            token=os.environ.get("SEGPIPE_TOKEN"),
            limit=limit,
            idle=idle,
            dataset=self.segpipe_options[mode],
            rect=bool(getattr(self.args, "rect", False)),
        )

    def preprocess_batch(self, batch: dict) -> dict:
        batch = super().preprocess_batch(batch)
        if self.args.overlap_mask:
            to_overlap(batch)
            batch["sem_masks"] = overlap_semantic_masks(batch["masks"], batch["cls"], batch["batch_idx"])
        elif "sem_masks" not in batch:
            batch["sem_masks"] = semantic_masks(batch["masks"], batch["cls"], batch["batch_idx"], batch["img"].shape[0])
        return batch

    def get_validator(self):
        """Ultralytics' validator, as the segpipe one: super() sets what the
        installed release sets (loss_names, where it names them there), and
        its validator's loader, directory and callbacks are taken over."""
        base = super().get_validator()
        v = SegpipeSegmentationValidator(base.dataloader, save_dir=base.save_dir, args=copy(self.args), _callbacks=base.callbacks)
        v.segpipe_data = self.data
        return v

    def plot_training_labels(self) -> None:
        """Ultralytics plots the label statistics of its dataset; the labels
        live in the server here."""
        LOGGER.info("segpipe: label plots skipped (the labels are in the server's shards)")

    def dataset_info(self, shards: str) -> dict:
        """The server's description of a shard set (images, categories)."""
        from .flight import FlightBatches

        with FlightBatches(
            self.segpipe_source.addr,
            shards,
            rank=0,
            world_size=1,
            token=os.environ.get("SEGPIPE_TOKEN"),
            tls=self.segpipe_source.tls,
        ) as fb:
            return fb.dataset_info()
