#!/usr/bin/env python3
"""Loader throughput with Ultralytics' training settings on, segpipe beside
Ultralytics' own loader, in one session on one machine.

    python3 scripts/bench-settings-vs-ultralytics.py --segpipe ./segpipe \\
        [--set copy_paste=0.5,mixup=0.5] [--set ''] [--rounds 3]

Each --set is one row (comma-separated settings of the augmentation table,
'' for the defaults); by default the defaults and copy_paste=0.5,mixup=0.5.
The images are coco-tiny's train and val (160 real COCO images), for
Ultralytics as YOLO labels its own convert_coco writes, for segpipe as the
shards `segpipe convert coco` writes from the same annotations. Per round
and row, in turn: `segpipe bench` (batch, imgsz, the settings as flags;
--repeat 8 so an epoch boundary is rare), then Ultralytics' training
dataset (build_yolo_dataset, mode train, the same settings) through its
InfiniteDataLoader (build_dataloader) with workers 0 and 2: warm-up
batches, then --batches timed ones. Prints images/s per row and the ratio
of segpipe's median to each Ultralytics median, and writes the JSON to
--out. Keep the machine otherwise idle: a loaded run flatters either side.

Needs torch, ultralytics, a segpipe binary and coco-tiny (--coco).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_set(s: str) -> dict:
    out = {}
    for kv in filter(None, (x.strip() for x in s.split(","))):
        k, _, v = kv.partition("=")
        out[k.strip()] = float(v) if v.strip().replace(".", "", 1).isdigit() else v.strip()
    return out


def prepare(coco: str, work: str, seg: str) -> tuple[str, str, str]:
    """The merged COCO file, segpipe's shards and Ultralytics' image folder."""
    from ultralytics.data.converter import convert_coco

    a = json.load(open(os.path.join(coco, "annotations", "instances_train2017.json")))
    b = json.load(open(os.path.join(coco, "annotations", "instances_val2017.json")))
    a["images"] += b["images"]
    a["annotations"] += b["annotations"]
    ann = os.path.join(work, "ann")
    os.makedirs(ann, exist_ok=True)
    merged = os.path.join(ann, "instances_all.json")
    json.dump(a, open(merged, "w"))
    imgs = os.path.join(work, "ds", "images", "all")
    os.makedirs(imgs, exist_ok=True)
    for split in ("train2017", "val2017"):
        for f in os.listdir(os.path.join(coco, split)):
            dst = os.path.join(imgs, f)
            if not os.path.exists(dst):
                os.symlink(os.path.abspath(os.path.join(coco, split, f)), dst)
    flat = os.path.join(work, "flat")
    os.makedirs(flat, exist_ok=True)
    for f in os.listdir(imgs):
        if not os.path.exists(os.path.join(flat, f)):
            os.symlink(os.path.realpath(os.path.join(imgs, f)), os.path.join(flat, f))
    labels = os.path.join(work, "ds", "labels", "all")
    if not os.path.exists(labels):  # a --work folder of an earlier run keeps both conversions
        conv = os.path.join(work, "conv")
        convert_coco(labels_dir=ann, save_dir=conv, use_segments=True, cls91to80=True)
        os.makedirs(os.path.dirname(labels), exist_ok=True)
        os.rename(os.path.join(conv, "labels", "all"), labels)
    shards = os.path.join(work, "shards")
    if not os.path.exists(os.path.join(shards, "manifest.json")):
        subprocess.run([seg, "convert", "coco", "--annotations", merged, "--images", flat, "--out", shards],
                       check=True, capture_output=True)  # fmt: skip
    return merged, shards, imgs


def seg_row(seg: str, shards: str, a, settings: dict) -> float:
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]
    p = subprocess.run([seg, "bench", "--shards", shards, "--repeat", "8", "--batch", str(a.batch), "--imgsz", str(a.imgsz),
                        "--json", *flags], check=True, capture_output=True, text=True)  # fmt: skip
    return float(json.loads(p.stdout)["images_per_s"])


def ul_row(imgs: str, a, settings: dict, workers: int) -> float:
    from ultralytics.cfg import DEFAULT_CFG, get_cfg
    from ultralytics.data.build import build_dataloader, build_yolo_dataset

    cfg = get_cfg(DEFAULT_CFG, dict(task="segment", imgsz=a.imgsz, batch=a.batch, cache=False, rect=False, **settings))
    data = {"names": {i: str(i) for i in range(80)}, "nc": 80, "channels": 3, "train": imgs}
    ds = build_yolo_dataset(cfg, imgs, a.batch, data, mode="train", rect=False, stride=32)
    loader = build_dataloader(ds, batch=a.batch, workers=workers, shuffle=True, rank=-1)
    def endless():  # one epoch of 160 images is 5 batches of 32: go on into the next
        while True:
            yield from loader

    it = endless()
    for _ in range(a.warmup):
        next(it)
    n, t = 0, time.perf_counter()
    for _ in range(a.batches):
        n += next(it)["img"].shape[0]
    dt = time.perf_counter() - t
    if hasattr(loader, "close"):  # later 8.4 releases
        loader.close()
    elif workers > 0:
        loader.iterator._shutdown_workers()
    return n / dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segpipe", required=True, help="segpipe binary")
    ap.add_argument("--coco", default=os.path.join(HERE, "..", "..", "shared", "data", "coco-tiny"))
    ap.add_argument("--set", action="append", dest="sets", help="one row's settings, e.g. copy_paste=0.5,mixup=0.5")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batches", type=int, default=10, help="timed Ultralytics batches per window")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    os.environ.setdefault("YOLO_OFFLINE", "true")
    sets = a.sets if a.sets is not None else ["", "copy_paste=0.5,mixup=0.5"]
    work = a.work or tempfile.mkdtemp(prefix="segpipe-vs-ul-")
    os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(work, "yolo-config"))
    import ultralytics

    _, shards, imgs = prepare(os.path.abspath(a.coco), work, a.segpipe)
    workers = [int(w) for w in a.workers.split(",")]
    res = {s: {"segpipe": [], **{f"ultralytics_w{w}": [] for w in workers}} for s in sets}
    for r in range(a.rounds):
        for s in sets:
            st = parse_set(s)
            res[s]["segpipe"].append(seg_row(a.segpipe, shards, a, st))
            for w in workers:
                res[s][f"ultralytics_w{w}"].append(ul_row(imgs, a, st, w))
            print(f"round {r}: {s or 'defaults'}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in res[s].items()), flush=True)
    print(f"\nUltralytics {ultralytics.__version__}, batch {a.batch}, imgsz {a.imgsz}, {a.rounds} rounds, {os.cpu_count()} CPUs")
    summary = {}
    for s, v in res.items():
        med = {k: statistics.median(x) for k, x in v.items()}
        summary[s or "defaults"] = med
        ratios = ", ".join(f"{med['segpipe'] / med[k]:.2f}x {k}" for k in med if k != "segpipe")
        print(f"{s or 'defaults'}: segpipe {med['segpipe']:.1f} img/s; " + ", ".join(f"{k} {m:.1f}" for k, m in med.items() if k != "segpipe") + f"; {ratios}")
    if a.out:
        json.dump({"ultralytics": ultralytics.__version__, "batch": a.batch, "imgsz": a.imgsz, "rounds": res, "medians": summary},
                  open(a.out, "w"), indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
