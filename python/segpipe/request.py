"""Loader requests (DoGet tickets) and resume states, as `segpipe serve` reads them.

Pure Python, no third-party import: the ticket is the JSON object that
pipeline/remote (request.go) parses, and every check here mirrors one the
server makes, so a bad setting fails in the trainer's process with the name of
the field instead of as an InvalidArgument from the server. The server stays
the authority: it re-checks everything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

# Re-exported: a trainer reads the settings' defaults and docs from here.
from ._augment import AUGMENT_DEFAULTS, AUGMENT_ENUM, AUGMENT_MAX, AUGMENT_TYPES, AUGMENT_USAGE, IMGSZ_DEFAULT, IMGSZ_MAX  # noqa: F401

#: The ticket format version this package writes (remote.RequestVersion).
REQUEST_VERSION = 1

MASKS_DENSE = "dense"
MASKS_WINDOWED = "windowed"

#: Body compressions of a stream (remote.Compression*): Arrow IPC buffer
#: compression, which pyarrow undoes on read, so the tensors are the same
#: either way. "" (the default) sends the buffers as they are.
COMPRESSION_NONE = ""
COMPRESSION_LZ4 = "lz4"
COMPRESSION_ZSTD = "zstd"
COMPRESSIONS = (COMPRESSION_NONE, COMPRESSION_LZ4, COMPRESSION_ZSTD)

#: Largest batch size a server loader accepts (pipeline.MaxBatchSize).
MAX_BATCH_SIZE = 1 << 16
#: The mask grid stride a server streams.
MASK_STRIDE = 4
_MAX_UINT64 = (1 << 64) - 1

#: The augmentation settings a request may carry. Their types, defaults and
#: accepted ranges (AUGMENT_TYPES, AUGMENT_DEFAULTS, AUGMENT_MAX) come from
#: the server's own table, augment.Config, through the generated _augment.
AUGMENT_KEYS = frozenset(AUGMENT_TYPES)

_REQUEST_KEYS = frozenset(
    {
        "version",
        "shards",
        "start",
        "epochs",
        "close_mosaic",
        "rank",
        "world_size",
        "batch_size",
        "imgsz",
        "val",
        "augment",
        "masks",
        "limit",
        "compression",
        "classes",
        "single_cls",
        "fraction",
        "rect",
        "multi_scale",
    }
)

#: The most classes a request may keep (pipeline.MaxKeepClasses).
MAX_KEEP_CLASSES = 1 << 16
_MAX_INT32 = (1 << 31) - 1


def fraction_rows(rows: int, fraction: float) -> int:
    """Rows a request's ``fraction`` keeps of a set of ``rows``
    (pipeline.FractionRows): the first max(1, round(rows * fraction)) in
    manifest order, Python's round as Ultralytics counts them; every row for
    0 (unset) or 1."""
    _int("rows", rows, 0)
    if fraction <= 0 or fraction >= 1 or rows == 0:
        return rows
    return min(rows, max(1, round(rows * fraction)))


class RequestError(ValueError):
    """A request the server would refuse; the message names the field."""


class StateError(ValueError):
    """A batch whose app metadata is not a segpipe resume state."""


def _int(name: str, v: Any, lo: int | None = None, hi: int | None = None) -> int:
    # bool is an int subclass; the server's JSON decoder refuses true for an int.
    if isinstance(v, bool) or not isinstance(v, int):
        raise RequestError(f"{name} {v!r}: want an integer")
    if lo is not None and v < lo:
        raise RequestError(f"{name} {v}: must be at least {lo}")
    if hi is not None and v > hi:
        raise RequestError(f"{name} {v}: must be at most {hi}")
    return v


@dataclass(frozen=True)
class ResumeState:
    """Where a loader stands: the seed, the epoch and the samples of that epoch
    that all ranks together have consumed (order.State). A fresh run is
    ``ResumeState(seed)``; every batch of a stream carries the state after it."""

    seed: int = 0
    epoch: int = 0
    consumed: int = 0

    def __post_init__(self) -> None:
        _int("start.seed", self.seed, 0, _MAX_UINT64)
        _int("start.epoch", self.epoch, 0)
        _int("start.consumed", self.consumed, 0)

    def to_json(self) -> dict:
        return {"seed": self.seed, "epoch": self.epoch, "consumed": self.consumed}

    @classmethod
    def coerce(cls, v: "ResumeState | Mapping | None") -> "ResumeState":
        """A ResumeState from itself, a mapping with the three keys (a saved
        ``state().to_json()``), or None for a fresh run with seed 0."""
        if v is None:
            return cls()
        if isinstance(v, cls):
            return v
        if isinstance(v, Mapping):
            extra = set(v) - {"seed", "epoch", "consumed"}
            if extra:
                raise RequestError(f"start: unknown keys {sorted(extra)}; want seed, epoch, consumed")
            return cls(seed=v.get("seed", 0), epoch=v.get("epoch", 0), consumed=v.get("consumed", 0))
        raise RequestError(f"start {v!r}: want a ResumeState or a mapping of seed, epoch, consumed")


def parse_app_metadata(raw: bytes | bytearray | memoryview | None, index: int) -> tuple[ResumeState, int]:
    """Decode a batch's Flight app metadata, {"seed","epoch","consumed","batch"}.

    Returns the resume state after the batch and its index in its stream.
    index is the batch's position as the consumer counted it, for the message.
    """
    if raw is None or len(raw) == 0:
        raise StateError(f"batch {index} carries no app metadata: the server is not a segpipe server, or too old")
    try:
        d = json.loads(bytes(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StateError(f"batch {index}: app metadata is not JSON: {e}") from None
    if not isinstance(d, dict):
        raise StateError(f"batch {index}: app metadata {d!r} is not an object")
    missing = [k for k in ("seed", "epoch", "consumed", "batch") if k not in d]
    if missing:
        raise StateError(f"batch {index}: app metadata lacks {', '.join(missing)}")
    try:
        st = ResumeState(seed=d["seed"], epoch=d["epoch"], consumed=d["consumed"])
        b = _int("batch", d["batch"], 0)
    except RequestError as e:
        raise StateError(f"batch {index}: app metadata: {e}") from None
    return st, b


#: The longest shard set name a server accepts, in bytes (remote.MaxShardsLen).
MAX_SHARDS_LEN = 1024


def check_shards(name: str) -> str:
    """The shard set name as the server cleans it, or RequestError for a name
    that could leave the server's shard root or is over MAX_SHARDS_LEN bytes
    (remote.cleanSet)."""
    if not isinstance(name, str):
        raise RequestError(f"shards {name!r}: want a string")
    if len(name.encode()) > MAX_SHARDS_LEN:
        raise RequestError(f"shards {name[:64]!r}… ({len(name.encode())} bytes): over the limit of {MAX_SHARDS_LEN} bytes")
    if "\\" in name or name.startswith("/"):
        raise RequestError(f"shards {name!r}: want a path relative to the shard root, with forward slashes")
    if ".." in name.split("/"):
        raise RequestError(f"shards {name!r} leaves the shard root")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts) or "."


def _check_augment(aug: Mapping) -> dict:
    if not isinstance(aug, Mapping):
        raise RequestError(f"augment {aug!r}: want a mapping of setting to value")
    unknown = set(aug) - AUGMENT_KEYS
    if unknown:
        raise RequestError(f"augment: unknown settings {sorted(unknown)}; known: {sorted(AUGMENT_KEYS)}")
    out = {}
    for k, v in aug.items():
        if v is None:
            continue  # None keeps the server's default, as a missing key does
        kind = AUGMENT_TYPES[k]
        if kind == "uint8":
            out[k] = _int(f"augment.{k}", v, 0, 255)
        elif kind == "bool":
            if not isinstance(v, bool):
                raise RequestError(f"augment.{k} {v!r}: want true or false")
            out[k] = v
        elif kind == "enum":
            if not isinstance(v, str) or v not in AUGMENT_ENUM[k]:
                raise RequestError(f"augment.{k} {v!r}: want one of {', '.join(AUGMENT_ENUM[k])}")
            out[k] = v
        else:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise RequestError(f"augment.{k} {v!r}: want a number")
            hi = AUGMENT_MAX[k]
            if not (0 <= v <= hi):  # also refuses NaN
                raise RequestError(f"augment.{k} {v}: out of range [0, {hi}]")
            out[k] = float(v)
    lo, hi = out.get("scale_min", 0.0), out.get("scale_max", 0.0)
    if (lo or hi) and not (0 < lo <= hi):
        raise RequestError(f"augment: scale range [{lo}, {hi}]: want 0 < scale_min <= scale_max")
    return out


def _check_classes(classes: Any) -> tuple[int, ...]:
    if classes is None:
        return ()
    if isinstance(classes, (str, bytes, Mapping)) or not hasattr(classes, "__iter__"):
        raise RequestError(f"classes {classes!r}: want a list of class indices")
    out = tuple(_int("classes[]", c, 0, _MAX_INT32) for c in classes)
    if len(out) > MAX_KEEP_CLASSES:
        raise RequestError(f"classes: {len(out)} entries, at most {MAX_KEEP_CLASSES}")
    return out


@dataclass(frozen=True)
class Request:
    """One rank's loader request. Zero fields take the server's defaults
    (batch_size 32, imgsz 640, world_size 1, epochs start.epoch+1, the
    augmentation defaults, AUGMENT_DEFAULTS); ``augment`` overrides single
    settings by their YOLO hyper-parameter names (AUGMENT_KEYS, described in
    AUGMENT_USAGE)."""

    shards: str = ""
    start: ResumeState = field(default_factory=ResumeState)
    epochs: int = 0
    close_mosaic: int = 0
    rank: int = 0
    world_size: int = 0
    batch_size: int = 0
    imgsz: int = 0
    val: bool = False
    augment: Mapping[str, Any] | None = None
    masks: str = ""
    limit: int = 0
    compression: str = COMPRESSION_NONE
    #: Keep only the instances of these classes (Ultralytics' classes);
    #: None or empty: every class.
    classes: tuple[int, ...] | None = None
    #: Every instance becomes class 0 (Ultralytics' single_cls).
    single_cls: bool = False
    #: Stream only the set's first fraction_rows(images, fraction) rows in
    #: manifest order (Ultralytics' fraction as a share); 0 or 1: all.
    fraction: float = 0.0
    #: Rectangular batches (Ultralytics' rect, its validation default):
    #: images in aspect-ratio order (no shuffle), each batch on its own
    #: shape, carried at the top left of the stream's canvas with the live
    #: (h, w) in a trailing ``canvas`` column (record_arrays slices to it).
    #: Validation letterboxes onto the shape; training draws its random
    #: perspective onto it, with mosaic, mixup and cutmix off, as
    #: Ultralytics does. Not with multi_scale.
    rect: bool = False
    #: Ultralytics' multi_scale m in [0, 1): each training batch's side
    #: drawn on the 32 px grid in imgsz·(1 ± m), rendered at that side and
    #: carried like rect. 0: off. Training only.
    multi_scale: float = 0.0
    version: int = REQUEST_VERSION

    def validate(self) -> "Request":
        """Check what the server checks without the data; returns self."""
        if self.version != REQUEST_VERSION:
            raise RequestError(f"version {self.version!r}: this package speaks version {REQUEST_VERSION}")
        check_shards(self.shards)
        if not isinstance(self.start, ResumeState):
            raise RequestError(f"start {self.start!r}: want a ResumeState")
        for name in ("epochs", "close_mosaic", "rank", "world_size", "batch_size", "imgsz", "limit"):
            _int(name, getattr(self, name), 0)
        if not isinstance(self.val, bool):
            raise RequestError(f"val {self.val!r}: want true or false")
        if self.masks not in ("", MASKS_DENSE, MASKS_WINDOWED):
            raise RequestError(f"masks {self.masks!r}: want {MASKS_DENSE!r} or {MASKS_WINDOWED!r}")
        if not isinstance(self.compression, str) or self.compression not in COMPRESSIONS:
            raise RequestError(
                f"compression {self.compression!r}: want {COMPRESSION_LZ4!r}, {COMPRESSION_ZSTD!r} or {COMPRESSION_NONE!r} (uncompressed)"
            )
        bs = self.batch_size or 32
        if bs > MAX_BATCH_SIZE:
            raise RequestError(f"batch_size {bs}: want 1 to {MAX_BATCH_SIZE}")
        world = self.world_size or 1
        if self.rank >= world:
            raise RequestError(f"rank {self.rank} of world_size {world}: want 0 <= rank < world_size")
        epochs = self.epochs or self.start.epoch + 1
        if epochs <= self.start.epoch:
            raise RequestError(f"epochs {epochs} leaves nothing after start epoch {self.start.epoch}")
        imgsz = self.imgsz or IMGSZ_DEFAULT
        if imgsz > IMGSZ_MAX:
            raise RequestError(f"imgsz {imgsz} out of range (1..{IMGSZ_MAX})")
        if imgsz % MASK_STRIDE:
            raise RequestError(f"imgsz {imgsz} is not a multiple of the mask stride {MASK_STRIDE}")
        if self.augment is not None:
            _check_augment(self.augment)
        _check_classes(self.classes)
        if not isinstance(self.single_cls, bool):
            raise RequestError(f"single_cls {self.single_cls!r}: want true or false")
        f = self.fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (0 <= f <= 1):  # also refuses NaN
            raise RequestError(f"fraction {f!r}: want a share in (0, 1], or 0 for every row")
        if not isinstance(self.rect, bool):
            raise RequestError(f"rect {self.rect!r}: want true or false")
        m = self.multi_scale
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not (0 <= m < 1):  # also refuses NaN
            raise RequestError(f"multi_scale {m!r}: want a share in [0, 1)")
        if m and self.val:
            raise RequestError("multi_scale applies to training batches only, as Ultralytics draws it")
        if m and self.rect:
            raise RequestError("rect and multi_scale both shape the batches: ask for one")
        return self

    def to_json(self) -> dict:
        """The request as the JSON object of a ticket (zero fields left out,
        as the Go side writes them)."""
        self.validate()
        d: dict[str, Any] = {"version": self.version, "shards": self.shards, "start": self.start.to_json()}
        for name in ("epochs", "close_mosaic", "rank", "world_size", "batch_size", "imgsz", "limit"):
            if getattr(self, name):
                d[name] = getattr(self, name)
        if self.val:
            d["val"] = True
        if self.augment is not None:
            d["augment"] = _check_augment(self.augment)
        if self.masks:
            d["masks"] = self.masks
        if self.compression:
            d["compression"] = self.compression
        if self.classes:
            d["classes"] = list(_check_classes(self.classes))
        if self.single_cls:
            d["single_cls"] = True
        if self.fraction:
            d["fraction"] = float(self.fraction)
        if self.rect:
            d["rect"] = True
        if self.multi_scale:
            d["multi_scale"] = float(self.multi_scale)
        return d

    def ticket(self) -> bytes:
        """The DoGet ticket (and GetFlightInfo command) bytes."""
        return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False).encode()

    @property
    def transport(self) -> str:
        return self.masks or MASKS_DENSE

    def schedule_done(self, state: ResumeState, delivered: int) -> bool:
        """Whether ``delivered`` batches, the last one carrying ``state``, end
        this request's schedule: the state is past its last epoch."""
        epochs = self.epochs or self.start.epoch + 1
        return delivered > 0 and state.epoch >= epochs

    def resumed(self, state: ResumeState, delivered: int) -> "Request":
        """The request that continues this one after ``delivered`` batches whose
        last one carried ``state``: same settings, start moved, limit reduced."""
        limit = self.limit
        if limit:
            limit -= delivered
            if limit <= 0:
                raise RequestError(f"limit {self.limit} already reached after {delivered} batches")
        return replace(self, start=state, limit=limit).validate()

    @classmethod
    def from_ticket(cls, raw: bytes | str) -> "Request":
        """Parse and check a ticket as the server does (unknown fields refused)."""
        try:
            d = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RequestError(f"ticket is not a version {REQUEST_VERSION} loader request: {e}") from None
        if not isinstance(d, dict):
            raise RequestError(f"ticket is not a version {REQUEST_VERSION} loader request: not an object")
        unknown = set(d) - _REQUEST_KEYS
        if unknown:
            raise RequestError(f"ticket: unknown fields {sorted(unknown)}")
        kw = dict(d)
        kw["start"] = ResumeState.coerce(d.get("start"))
        kw.setdefault("version", 0)
        return cls(**kw).validate()



#: The max_memory that lifts a loader's memory budget (the library's
#: NoMemoryLimit, the CLI's --max-memory none).
NO_MEMORY_LIMIT = -1


def check_max_memory(v: Any) -> int:
    """A loader's max_memory in bytes as the library accepts it: at least 1,
    or NO_MEMORY_LIMIT for no budget. Other negative values, which the
    library refuses too, are more likely a mistake than a wish to run
    unbounded; None (the default budget) is the caller's to handle."""
    n = _int("max_memory", v)
    if n != NO_MEMORY_LIMIT and n < 1:
        raise RequestError(f"max_memory {n}: want bytes >= 1, None for the default budget or {NO_MEMORY_LIMIT} for none")
    return n


def rank_batches(images: int, batch_size: int, rank: int, world_size: int, consumed: int = 0) -> int:
    """Batches rank gets from an epoch of ``images`` samples started at global
    position ``consumed`` (pipeline/order): it takes positions consumed+rank,
    consumed+rank+world_size, ... below images, batch_size at a time, the last
    batch possibly short."""
    for name, v in (("images", images), ("batch_size", batch_size), ("world_size", world_size), ("consumed", consumed)):
        _int(name, v, 1 if name in ("batch_size", "world_size") else 0)
    _int("rank", rank, 0, world_size - 1)
    first = consumed + rank
    count = 0 if first >= images else (images - first + world_size - 1) // world_size
    return (count + batch_size - 1) // batch_size


@dataclass(frozen=True)
class Source:
    """A segpipe server and the shard sets a trainer reads, from a data URL:
    ``segpipe://HOST:PORT/TRAIN[?val=VAL&masks=dense|windowed&tls=1&mask_rule=RULE]``.

    TRAIN and VAL are shard sets below the server's root (VAL defaults to
    TRAIN). mask_rule picks the rasterisation of both streams' masks
    (AUGMENT_ENUM["mask_rule"]; the server's default when absent): a
    segpipe setting Ultralytics' own arguments have no name for. The bearer token is never part of the URL (URLs end up in logs
    and run files): it comes from the SEGPIPE_TOKEN environment variable."""

    addr: str
    train: str
    val: str
    masks: str = MASKS_WINDOWED
    tls: bool = False
    mask_rule: str = ""

    SCHEME = "segpipe://"

    @classmethod
    def parse(cls, url: str) -> "Source":
        from urllib.parse import parse_qs, urlsplit

        if not isinstance(url, str) or not url.startswith(cls.SCHEME):
            raise RequestError(f"data {url!r}: want {cls.SCHEME}HOST:PORT/SHARDS[?val=SHARDS&masks=windowed]")
        u = urlsplit(url)
        if not u.netloc or u.port is None:
            raise RequestError(f"data {url!r}: no HOST:PORT after {cls.SCHEME}")
        q = parse_qs(u.query, keep_blank_values=True, strict_parsing=bool(u.query))
        known = {"val", "masks", "tls", "mask_rule"}
        unknown = set(q) - known
        if "token" in unknown:
            raise RequestError("data URL: put the token in the SEGPIPE_TOKEN environment variable, not in the URL")
        if unknown:
            raise RequestError(f"data {url!r}: unknown parameters {sorted(unknown)}; known: {', '.join(sorted(known))}")
        for k, v in q.items():
            if len(v) != 1:
                raise RequestError(f"data {url!r}: parameter {k} given {len(v)} times")
        train = check_shards(u.path[1:] if u.path.startswith("/") else u.path)
        val = check_shards(q["val"][0]) if "val" in q else train
        masks = q.get("masks", [MASKS_WINDOWED])[0]
        if masks not in (MASKS_DENSE, MASKS_WINDOWED):
            raise RequestError(f"data {url!r}: masks {masks!r}: want {MASKS_DENSE!r} or {MASKS_WINDOWED!r}")
        tls = q.get("tls", ["0"])[0]
        if tls not in ("0", "1"):
            raise RequestError(f"data {url!r}: tls {tls!r}: want 0 or 1")
        rule = q.get("mask_rule", [""])[0]
        if "mask_rule" in q and rule not in AUGMENT_ENUM.get("mask_rule", ()):
            raise RequestError(f"data {url!r}: mask_rule {rule!r}: want one of {', '.join(AUGMENT_ENUM.get('mask_rule', ()))}")
        return cls(addr=u.netloc, train=train, val=val, masks=masks, tls=tls == "1", mask_rule=rule)


def even_batches(images: int, batch_size: int, world_size: int, consumed: int = 0) -> int:
    """Batches every rank takes of an epoch when all ranks take the same
    number (DDP steps the ranks together): those of the rank with the fewest
    samples, the last one (rank_batches)."""
    return rank_batches(images, batch_size, world_size - 1, world_size, consumed)

