"""Prints tickets as JSON lines, each with the verdict of segpipe.request
(accepted or refused), for `go run ./python/tests/check_tickets` to hold
against the server's own parser:

    python3 python/tests/tickets.py | go run ./python/tests/check_tickets
"""

import json
import sys

import _path  # noqa: F401
from segpipe.request import Request, RequestError, ResumeState

BASE = {"version": 1, "shards": "s", "start": {"seed": 0, "epoch": 0, "consumed": 0}}


def raw_cases():
    """Ticket objects, valid and not, written without the Python checks."""
    yield BASE
    yield dict(BASE, batch_size=8, imgsz=320, masks="windowed", limit=3, rank=1, world_size=4)
    yield dict(BASE, start={"seed": 18446744073709551615, "epoch": 2, "consumed": 96}, epochs=5, close_mosaic=1)
    yield dict(BASE, val=True, augment={"mosaic": 0.0, "fill": 114, "keep_crowd": True, "hsv_h": None})
    yield dict(BASE, augment={k: v for k, v in [("degrees", 180), ("shear", 89), ("perspective", 0.01), ("scale", 0.99)]})
    yield dict(BASE, augment={"min_side": 1e9, "max_aspect": 1e9, "min_area": 1})
    yield dict(BASE, shards="a//b/./c")
    yield dict(BASE, shards="")
    yield dict(BASE, shards="v" + "/." * 50_000)
    yield dict(BASE, shards="a" * 1024)
    yield dict(BASE, shards="a" * 1025)
    yield dict(BASE, imgsz=16384, batch_size=1 << 16)
    yield dict(BASE, classes=[0, 2, 2], single_cls=True, fraction=0.25)
    yield dict(BASE, classes=[], single_cls=False, fraction=1)
    yield dict(BASE, classes=[2147483647], fraction=0)
    yield dict(BASE, classes=list(range(1 << 16)))
    yield dict(BASE, val=True, rect=True)
    yield dict(BASE, multi_scale=0.5)
    yield dict(BASE, rect=True)
    yield dict(BASE, rect=True, multi_scale=0.5)
    yield dict(BASE, val=True, multi_scale=0.25)
    for comp in ("", "lz4", "zstd"):
        yield dict(BASE, compression=comp, masks="windowed")
    for bad in [
        {"masks": "rle"},
        {"compression": "none"},
        {"compression": "ZSTD"},
        {"compression": "lz4_frame"},
        {"compression": "gzip"},
        {"compression": 1},
        {"compression": True},
        {"rank": 2, "world_size": 2},
        {"rank": 1},
        {"rank": -1},
        {"batch_size": -1},
        {"batch_size": (1 << 16) + 1},
        {"imgsz": 642},
        {"imgsz": 16388},
        {"imgsz": -4},
        {"limit": -1},
        {"epochs": -1},
        {"close_mosaic": -1},
        {"world_size": -1},
        {"epochs": 2, "start": {"seed": 0, "epoch": 2, "consumed": 0}},
        {"start": {"seed": 0, "epoch": -1, "consumed": 0}},
        {"start": {"seed": 0, "epoch": 0, "consumed": -1}},
        {"start": {"seed": -1, "epoch": 0, "consumed": 0}},
        {"start": {"seed": 0, "epoch": 0, "consumed": 0, "batch": 1}},
        {"shards": "../etc"},
        {"shards": "a/../../b"},
        {"shards": "a/.."},
        {"shards": "/abs"},
        {"shards": "a\\b"},
        {"augment": {"mosaic": 1.5}},
        {"augment": {"scale": 1.0}},
        {"augment": {"degrees": -1}},
        {"augment": {"shear": 90}},
        {"augment": {"perspective": 0.02}},
        {"augment": {"min_area": 1.5}},
        {"augment": {"mixup": 0.1}},
        {"augment": {"fill": 256}},
        {"augment": {"fill": -1}},
        {"augment": {"fill": 1.5}},
        {"augment": {"keep_crowd": 1}},
        {"augment": {"mosaic": "1"}},
        {"batch_size": True},
        {"batch_size": 1.5},
        {"val": 1},
        {"version": 2},
        {"version": 0},
        {"turbo": True},
        {"classes": [-1]},
        {"classes": [2147483648]},
        {"classes": 3},
        {"classes": [1.5]},
        {"classes": ["1"]},
        {"classes": [True]},
        {"classes": list(range((1 << 16) + 1))},
        {"single_cls": 1},
        {"fraction": 1.5},
        {"fraction": -0.1},
        {"fraction": "0.5"},
        {"fraction": True},
        {"rect": 1},
        {"multi_scale": "0.5"},
        {"multi_scale": 1.0},
        {"multi_scale": -0.5},
        {"multi_scale": True},
    ]:
        yield dict(BASE, **bad)
    yield {"shards": "s"}  # no version


def main():
    n = 0
    for case in raw_cases():
        raw = json.dumps(case)
        try:
            Request.from_ticket(raw)
            ok, why = True, ""
        except RequestError as e:
            ok, why = False, str(e)
        print(json.dumps({"ticket": raw, "ok": ok, "why": why}))
        n += 1
    # And what Request itself writes must parse there.
    r = Request(shards="x/y", start=ResumeState(5, 1, 7), batch_size=4, imgsz=64, masks="dense", augment={"fliplr": 0})
    print(json.dumps({"ticket": r.ticket().decode(), "ok": True, "why": ""}))
    r = Request(shards="x", classes=(3, 1), single_cls=True, fraction=0.5)
    print(json.dumps({"ticket": r.ticket().decode(), "ok": True, "why": ""}))
    r = Request(shards="x", masks="windowed", compression="zstd")
    print(json.dumps({"ticket": r.ticket().decode(), "ok": True, "why": ""}))
    print(f"{n + 3} tickets", file=sys.stderr)


if __name__ == "__main__":
    main()
