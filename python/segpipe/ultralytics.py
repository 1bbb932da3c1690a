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
``bboxes`` normalised xywh, ``masks`` (n,Hp,Wp) one plane per instance as with
overlap_mask=False (which this trainer sets), ``sem_masks`` (N,Hp,Wp),
``ori_shape``, ``ratio_pad``, ``resized_shape``, ``im_file``.

Written and checked against Ultralytics 8.4.2 (see ULTRALYTICS_VERSION).
Augmentation runs in the server: mosaic, degrees, translate, scale, shear,
perspective, hsv_h/s/v and fliplr are passed on; flipud, mixup, cutmix,
copy_paste, bgr, rect, cache, fraction and classes have no segpipe
counterpart, and a non-default value is refused rather than silently ignored.
"""

from __future__ import annotations

import os
from copy import copy
from typing import Any, Callable, Iterator

import torch
from ultralytics import __version__ as _ul_version
from ultralytics.models.yolo.segment import SegmentationTrainer, SegmentationValidator
from ultralytics.utils import LOGGER

from .request import RequestError, ResumeState, Source, rank_batches

#: The Ultralytics release this adapter was written and checked against.
ULTRALYTICS_VERSION = "8.4.2"

# Ultralytics hyper-parameters the server's augmenter implements, same names.
_AUGMENT = ("mosaic", "degrees", "translate", "scale", "shear", "perspective", "hsv_h", "hsv_s", "hsv_v", "fliplr")
# Settings with no segpipe counterpart, and the value that means "off".
_UNSUPPORTED = {
    "flipud": 0.0,
    "mixup": 0.0,
    "cutmix": 0.0,
    "copy_paste": 0.0,
    "bgr": 0.0,
    "rect": False,
    "cache": False,
    "fraction": 1.0,
    "classes": None,
    "single_cls": False,
}


def semantic_masks(masks: torch.Tensor, cls: torch.Tensor, batch_idx: torch.Tensor, n: int) -> torch.Tensor:
    """Per image the largest class index over its instances' masks, float
    (N, Hp, Wp): what Ultralytics' Format gives YOLO26's semantic head with
    overlap_mask=False (background and class 0 are both 0, as there)."""
    hp, wp = masks.shape[-2:]
    sem = torch.zeros((n, hp * wp), dtype=torch.float32, device=masks.device)
    if masks.shape[0]:
        vals = masks.reshape(masks.shape[0], -1).to(torch.float32) * cls.reshape(-1, 1).to(torch.float32)
        idx = batch_idx.reshape(-1, 1).long().expand(-1, hp * wp)
        sem.scatter_reduce_(0, idx, vals, reduce="amax", include_self=True)
    return sem.reshape(n, hp, wp)


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


class _Sampler:
    """What the trainer calls on a DDP loader's sampler."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class _Dataset:
    """The loader's dataset as the trainer sees it: a length and the
    close_mosaic switch (the server does the rest)."""

    def __init__(self, images: int, loader: "SegpipeLoader") -> None:
        self.images = images
        self.loader = loader
        self.labels: list = []

    def __len__(self) -> int:
        return self.images

    def close_mosaic(self, hyp: Any) -> None:
        self.loader.mosaic_closed = True


class SegpipeLoader:
    """A DataLoader stand-in: each iteration is one epoch of this rank's
    batches, one stream from the server, started at (seed, epoch, 0).

    epoch_fn tells the epoch being iterated (the trainer's self.epoch), so
    that resuming a run resumes the server's order and augmentation too.
    """

    num_workers = 0

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
    ) -> None:
        self.source, self.shards = source, shards
        self.dataset = _Dataset(images, self)
        self.batch_size, self.imgsz = batch_size, imgsz
        self.rank, self.world_size = rank, world_size
        self.seed, self.val, self.augment = seed, val, dict(augment)
        self.epoch_fn = epoch_fn
        self.token = token
        self.sampler = _Sampler()
        self.mosaic_closed = False
        self.last_state: ResumeState | None = None

    def __len__(self) -> int:
        return rank_batches(self.dataset.images, self.batch_size, self.rank, self.world_size)

    def reset(self) -> None:
        """Nothing to rebuild: the next epoch's stream reads mosaic_closed."""

    def stream(self, epoch: int) -> Iterator[dict]:
        """The FlightBatches of one epoch (a subclass may serve others)."""
        from .flight import FlightBatches  # pyarrow only where a stream is opened

        aug = dict(self.augment)
        if self.mosaic_closed:
            aug["mosaic"] = 0.0
        return FlightBatches(
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
            augment=None if self.val else aug,
            token=self.token,
            tls=self.source.tls,
        )

    def __iter__(self) -> Iterator[dict]:
        # A generator: the trainer calls iter() twice per epoch (enumerate
        # before and after its progress bar), and only the second is read.
        fb = self.stream(self.epoch_fn())
        prefix = f"{Source.SCHEME}{self.source.addr}/{self.shards}/"
        try:
            for b in fb:
                self.last_state = b["state"]
                yield ultralytics_batch(b, im_prefix=prefix, semantic=False)
        finally:
            close = getattr(fb, "close", None)
            if close is not None:
                close()


class SegpipeSegmentationValidator(SegmentationValidator):
    """Ultralytics' SegmentationValidator with the data dict of the trainer.

    During training the validator takes the trainer's data; the final
    validation of best.pt runs it stand-alone, where Ultralytics reads the
    data dict from a dataset YAML, which a segpipe source does not have: the
    trainer's dict is handed over for that one lookup."""

    segpipe_data: dict | None = None

    def __call__(self, trainer: Any = None, model: Any = None):
        if trainer is not None or self.segpipe_data is None:
            return super().__call__(trainer, model)
        import ultralytics.engine.validator as base

        data, lookup = self.args.data, base.check_det_dataset
        base.check_det_dataset = lambda *_a, **_k: self.segpipe_data
        self.args.data = "segpipe.yaml"  # routes the stand-alone path to the lookup above
        try:
            return super().__call__(trainer, model)
        finally:
            base.check_det_dataset, self.args.data = lookup, data


class SegpipeSegmentationTrainer(SegmentationTrainer):
    """Ultralytics' SegmentationTrainer fed by a segpipe server: pass it as
    ``trainer=`` with ``data="segpipe://HOST:PORT/TRAIN?val=VAL"`` (see
    Source; the token comes from SEGPIPE_TOKEN)."""

    def __init__(self, cfg: Any = None, overrides: dict | None = None, _callbacks: Any = None):
        overrides = dict(overrides or {})
        if overrides.get("overlap_mask", False):
            LOGGER.info("segpipe: overlap_mask=False (segpipe batches carry one mask plane per instance)")
        overrides["overlap_mask"] = False
        if overrides.get("mask_ratio", 4) != 4:
            raise RequestError(f"mask_ratio {overrides['mask_ratio']}: segpipe serves masks at stride 4")
        if cfg is None:
            super().__init__(overrides=overrides, _callbacks=_callbacks)
        else:
            super().__init__(cfg, overrides, _callbacks)

    def get_dataset(self) -> dict:
        """The data dict from the server's description of the shard sets."""
        self.segpipe_source = Source.parse(str(self.args.data))
        for k, off in _UNSUPPORTED.items():
            v = getattr(self.args, k, off)
            if v != off and not (k == "cache" and v in (None, "False", "false")):
                raise RequestError(f"{k}={v!r} has no segpipe counterpart; leave it at {off!r}")
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
        self.segpipe_images = {"train": int(info["images"]), "val": int(val_info["images"])}
        return {
            "train": self.segpipe_source.train,
            "val": self.segpipe_source.val,
            "nc": len(names),
            "names": names,
            "channels": 3,
        }

    def get_dataloader(self, dataset_path: str, batch_size: int = 16, rank: int = 0, mode: str = "train"):
        assert mode in {"train", "val"}, f"Mode must be 'train' or 'val', not {mode}."
        world = max(self.world_size, 1)
        r = max(rank, 0)
        aug = {k: float(getattr(self.args, k)) for k in _AUGMENT}
        return self.loader_class(
            self.segpipe_source,
            dataset_path,
            images=self.segpipe_images[mode],
            batch_size=batch_size,
            imgsz=int(self.args.imgsz),
            rank=r if mode == "train" else 0,
            world_size=world if mode == "train" else 1,
            seed=int(self.args.seed),
            val=mode == "val",
            augment=aug,
            epoch_fn=lambda: int(getattr(self, "epoch", 0) or 0),
            token=os.environ.get("SEGPIPE_TOKEN"),
        )

    def preprocess_batch(self, batch: dict) -> dict:
        batch = super().preprocess_batch(batch)
        if "sem_masks" not in batch:
            batch["sem_masks"] = semantic_masks(batch["masks"], batch["cls"], batch["batch_idx"], batch["img"].shape[0])
        return batch

    def get_validator(self):
        self.loss_names = "box_loss", "seg_loss", "cls_loss", "dfl_loss", "sem_loss"
        v = SegpipeSegmentationValidator(self.test_loader, save_dir=self.save_dir, args=copy(self.args), _callbacks=self.callbacks)
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


def check_version() -> str | None:
    """A warning when the installed Ultralytics is not the release this adapter
    was checked against, else None."""
    if _ul_version != ULTRALYTICS_VERSION:
        return f"segpipe.ultralytics was checked against Ultralytics {ULTRALYTICS_VERSION}; this is {_ul_version}"
    return None
