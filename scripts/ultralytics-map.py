#!/usr/bin/env python3
"""Learning equality: Ultralytics' own loader against segpipe with each mask rule.

Trains YOLO26n-seg from yolo26n-seg.yaml (no pretrained weights) with
Ultralytics' trainer, the same recipe for every loader, over several seeds,
and scores each final model on held-out images, so that a difference between
loaders can be read against the spread between seeds:

- "ultralytics": Ultralytics' own loader, on a YOLO-format folder this script
  writes from the COCO annotations (one label line per non-crowd instance,
  polygon normalised by the image size; an instance of several parts is
  joined into one polygon by Ultralytics' own merge_multi_segment, as its
  COCO converter does); its masks come from polygon2mask;
- "segpipe-exact", "segpipe-ultralytics": `segpipe convert coco` of the same
  annotations, `segpipe serve` on loopback and
  segpipe.ultralytics.SegpipeSegmentationTrainer, its training stream asked
  for mask_rule exact (cell centre inside the polygon) or ultralytics
  (polygon2mask's cells). A segpipe whose augmentation table
  (segpipe._augment.AUGMENT_TYPES) has no mask_rule rasterises by the exact
  rule only: segpipe-exact runs without the setting and
  segpipe-ultralytics is skipped, with a note in the output.

Recipe, the same for every loader: mosaic on for the whole run
(close_mosaic 0: segpipe's adapter closes mosaic alone where Ultralytics
also stops copy-paste, so closing it would make the recipes differ),
copy_paste (--copy-paste, default 0.5, flip mode) on, overlap_mask True
(Ultralytics' default), Ultralytics' defaults for the rest (HSV, horizontal
flips, scale, translate), every batch an optimiser step (nbs = batch),
AdamW, no warm-up on the synthetic set. The trainer validates only after
the last epoch (val False): the figures compared are the script's own.

Scoring: the final model (last.pt; best.pt is chosen by each loader's own
validation, which differs between loaders, so it is not compared) predicts
the held-out images through Ultralytics' predictor (the same code for every
loader, conf 0.001, at most 100 detections an image, masks at the image's
own size) and pycocotools scores the predictions against the COCO
annotations: mask and box AP 0.50:0.95 and AP50, and mask AP of small,
medium and large instances (pycocotools areaRng split at --size-split:
COCO's 32 and 96 px of sqrt(area) on coco-tiny; on the synthetic set, whose
shapes are nearly all COCO-medium, the terciles of the scored instances;
the JSON gives the bounds and counts the instances of each). Each
loader's figures are given as mean ± sd (sample sd) over the seeds.

Data (--data):
- synth (default): the quickstart's easy set (`segpipe quickstart --epochs
  0`: the first --images training images of 1-3 large plain shapes of 2
  classes, and the first --val-images of its held-out validation set, drawn
  with another seed), on which a model reaches mask mAP50 > 0.9 in minutes
  on a CPU at 128 px; more held-out images than the quickstart's 50 make
  the score itself less noisy;
- coco: coco-tiny (--coco, split --split), cut to --categories (default
  person); the first --images images by id with a non-crowd polygon
  instance train, the next --val-images are held out (0: validate on the
  training images, an overfit).

    python3 scripts/ultralytics-map.py --quick          # smoke run, minutes
    python3 scripts/ultralytics-map.py --seeds 0,1,2    # the comparison

--quick: one seed, 2 epochs, 40 synthetic training images (10 held out; 8
and 8 of coco-tiny): it says the script runs end to end, not which loader
is better.

Needs torch, ultralytics (segpipe.ultralytics.ULTRALYTICS_REQUIREMENT),
pyarrow, pycocotools and a segpipe binary (--segpipe, $SEGPIPE_BINARY, segpipe
on PATH, or go to build one). Prints a table, writes the JSON to --out and
prints where. Nothing is downloaded (YOLO_OFFLINE, a config folder of its
own with a font matplotlib ships for the plots Ultralytics draws).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "python", "tests"))  # harness: segpipe serve on loopback

#: The loaders compared, in table order: "ultralytics" or "segpipe-RULE".
LOADERS = ("ultralytics", "segpipe-exact", "segpipe-ultralytics")
# Defaults that depend on the data: a model learns the synthetic set at 128
# px from 200 images with the quickstart's schedule (batch 8, lr0 0.002, no
# warm-up); with mosaic and copy-paste on, 15 epochs gave held-out mask
# mAP50 1.0 and mAP50-95 0.86, so 20 leave mAP50-95 (the boundary-sensitive
# figure) to tell the loaders apart. On coco-tiny it overfits a few person
# images at 320 px.
_DATA_DEFAULTS = {
    "synth": dict(images=200, val_images=200, imgsz=128, epochs=20, batch=8, lr0=0.002, warmup_epochs=0.0, categories="all", size_split="terciles"),
    "coco": dict(images=16, val_images=0, imgsz=320, epochs=60, batch=4, lr0=0.004, warmup_epochs=1.0, categories="person", size_split="32,96"),
}
# What --quick changes (unless given on the command line).
_QUICK = {"synth": dict(images=40, val_images=10, epochs=2, seeds="0"), "coco": dict(images=8, val_images=8, epochs=2, seeds="0")}
_SEEDS = "0,1,2"


def parse_args(argv=None):
    """The command line, with the data's defaults (and --quick's) filled in
    where an option was not given."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", choices=sorted(_DATA_DEFAULTS), default="synth", help="synth (the quickstart's easy set) or coco (coco-tiny)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 2 epochs, few images")
    p.add_argument("--coco", default=os.path.join(REPO, "..", "shared", "data", "coco-tiny"), help="coco-tiny folder (annotations/instances_val2017.json, val2017/)")
    p.add_argument("--split", default="val2017", help="split of --coco to take the images from")
    p.add_argument("--images", type=int, help="training images (synth: 200, coco: 16)")
    p.add_argument("--val-images", type=int, help="held-out images scored (synth: 200; coco: 0, the training images, an overfit)")
    p.add_argument("--categories", help="comma-separated category names to keep (all: every one); synth: all, coco: person")
    p.add_argument("--imgsz", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--nbs", type=int, default=0, help="nominal batch size (default: --batch, so that every batch is an optimiser step)")
    p.add_argument("--optimizer", default="AdamW")
    p.add_argument("--lr0", type=float)
    p.add_argument("--warmup-epochs", type=float)
    p.add_argument("--mosaic", type=float, default=1.0)
    p.add_argument("--copy-paste", type=float, default=0.5, help="copy_paste (flip mode); 0 runs without")
    p.add_argument("--seeds", help=f"comma-separated seeds, each trains every loader (default {_SEEDS})")
    p.add_argument("--loaders", default=",".join(LOADERS), help=f"comma-separated, of {', '.join(LOADERS)}")
    p.add_argument("--size-split", help="small/medium and medium/large bounds S,M in sqrt(area) px, or terciles "
                   "(thirds of the scored instances); synth: terciles, coco: 32,96 (COCO's)")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1), help="torch threads")
    p.add_argument("--segpipe", default=os.environ.get("SEGPIPE_BINARY", ""), help="segpipe binary")
    p.add_argument("--workdir", default="", help="folder for data, shards and runs (default: a temporary one, kept: it holds the JSON)")
    p.add_argument("--out", default="", help="JSON result file (default: WORKDIR/ultralytics-map.json)")
    a = p.parse_args(argv)
    given = {k: v for k, v in vars(a).items() if v is not None}
    fill = dict(_DATA_DEFAULTS[a.data], seeds=_SEEDS)
    if a.quick:
        fill.update(_QUICK[a.data])
    for k, v in fill.items():
        if k not in given:
            setattr(a, k, v)
    try:
        a.seed_list = [int(s) for s in str(a.seeds).split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds {a.seeds!r}: want comma-separated integers")
    if not a.seed_list or len(set(a.seed_list)) != len(a.seed_list):
        p.error(f"--seeds {a.seeds!r}: want distinct seeds")
    a.loader_list = [x.strip() for x in a.loaders.split(",") if x.strip()]
    bad = [x for x in a.loader_list if x not in LOADERS]
    if bad or not a.loader_list:
        p.error(f"--loaders {a.loaders!r}: want some of {', '.join(LOADERS)}")
    if a.size_split != "terciles":
        try:
            area_ranges(a.size_split)
        except ValueError as e:
            p.error(str(e))
    if not 0 <= a.copy_paste <= 1:
        p.error(f"--copy-paste {a.copy_paste}: want 0..1")
    if a.images < 1 or a.val_images < (1 if a.data == "synth" else 0):
        p.error("--images must be at least 1 and --val-images at least 0 (synth: 1)")
    return a


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- statistics -----------------------------------------------------------------


def area_ranges(split: str) -> list:
    """pycocotools areaRng (all, small, medium, large) for "S,M", the
    bounds in px of sqrt(area)."""
    try:
        s, m = (float(v) for v in split.split(","))
    except ValueError:
        raise ValueError(f"--size-split {split!r}: want two numbers S,M (sqrt(area) px)") from None
    if not 0 < s < m:
        raise ValueError(f"--size-split {split!r}: want 0 < S < M")
    return [[0.0, 1e10], [0.0, s * s], [s * s, m * m], [m * m, 1e10]]


def tercile_split(coco: dict) -> str:
    """"S,M": the sqrt(area) bounds that put a third of the non-crowd
    instances in each size (the synthetic shapes are nearly all COCO
    medium, so COCO's bounds would leave small and large all but empty)."""
    s = sorted(math.sqrt(float(a["area"])) for a in coco["annotations"] if not a.get("iscrowd"))
    if len(s) < 3:
        raise ValueError(f"terciles of {len(s)} instances")
    lo, hi = s[len(s) // 3], s[2 * len(s) // 3]
    if not 0 < lo < hi:
        raise ValueError(f"terciles {lo}, {hi} of the instances' sqrt(area): want 0 < S < M")
    return f"{lo:.2f},{hi:.2f}"


def size_counts(coco: dict, area_rng: list) -> dict:
    """Non-crowd ground-truth instances of each size, by the annotation's
    area as COCOeval reads it (a bound belongs to both sides there; here to
    the larger)."""
    out = {"small": 0, "medium": 0, "large": 0}
    for a in coco["annotations"]:
        if a.get("iscrowd"):
            continue
        area = float(a["area"])
        key = "small" if area < area_rng[1][1] else "medium" if area < area_rng[2][1] else "large"
        out[key] += 1
    return out


def mean_sd(vals: list) -> dict | None:
    """Mean and sample sd of the figures that exist (None: a size with no
    instance); sd is None for a single figure."""
    v = [float(x) for x in vals if x is not None]
    if not v:
        return None
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else None
    return {"mean": round(m, 4), "sd": None if sd is None else round(sd, 4), "n": len(v), "runs": [round(x, 4) for x in v]}


#: The figures summarised per loader, and their table headings.
METRICS = (
    ("mask_map", "mask mAP50-95"),
    ("mask_map50", "mask mAP50"),
    ("mask_ap_small", "mask AP S"),
    ("mask_ap_medium", "mask AP M"),
    ("mask_ap_large", "mask AP L"),
    ("box_map", "box mAP50-95"),
    ("box_map50", "box mAP50"),
)


def summarise(runs: list) -> dict:
    """Per loader (in LOADERS order), each METRICS figure of the runs'
    final models as mean_sd, and the training seconds."""
    out = {}
    for loader in [x for x in LOADERS if any(r["loader"] == x for r in runs)]:
        rs = [r for r in runs if r["loader"] == loader and "last" in r]
        s = {k: mean_sd([r["last"].get(k) for r in rs]) for k, _ in METRICS}
        s["seeds"] = [r["seed"] for r in rs]
        s["train_s"] = [r["train_s"] for r in rs]
        out[loader] = s
    return out


def fmt(s: dict | None) -> str:
    if s is None:
        return "-"
    return f"{s['mean']:.3f}" if s["sd"] is None else f"{s['mean']:.3f} ± {s['sd']:.3f}"


def table(summary: dict) -> str:
    """The summary as a fixed-width text table, one row per loader."""
    head = ["loader", "seeds"] + [h for _, h in METRICS]
    rows = [[loader, str(len(s["seeds"]))] + [fmt(s.get(k)) for k, _ in METRICS] for loader, s in summary.items()]
    w = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r))  # noqa: E731
    return "\n".join([line(head), "  ".join("-" * x for x in w)] + [line(r) for r in rows])


# -- data -----------------------------------------------------------------------


def segpipe_binary(given: str, work: str) -> str:
    if given:
        return given
    found = shutil.which("segpipe")
    if found:
        return found
    if shutil.which("go") is None:
        sys.exit("no segpipe binary: pass --segpipe, set SEGPIPE_BINARY or put go on PATH")
    out = os.path.join(work, "segpipe")
    subprocess.run(["go", "build", "-o", out, "."], cwd=REPO, env=dict(os.environ, CGO_ENABLED="0"), check=True)
    return out


def usable(ann_file: str, categories: str) -> tuple[dict, list]:
    """The annotation file cut to the kept categories (crowd annotations
    too: COCOeval ignores what they cover), and its images by id that have
    at least one non-crowd polygon instance of them."""
    with open(ann_file) as f:
        d = json.load(f)
    cats = d["categories"]
    if categories != "all":
        want = {c.strip() for c in categories.split(",") if c.strip()}
        missing = want - {c["name"] for c in cats}
        if missing:
            sys.exit(f"{ann_file}: no categories {sorted(missing)}")
        cats = [c for c in cats if c["name"] in want]
    keep = {c["id"] for c in cats}
    anns = [a for a in d["annotations"] if a["category_id"] in keep]
    ok = {a["image_id"] for a in anns if not a.get("iscrowd") and isinstance(a.get("segmentation"), list) and a["segmentation"]}
    images = sorted((im for im in d["images"] if im["id"] in ok), key=lambda im: im["id"])
    return {"images": [], "annotations": anns, "categories": cats}, images


def restrict(d: dict, images: list) -> dict:
    ids = {im["id"] for im in images}
    return {"images": images, "annotations": [a for a in d["annotations"] if a["image_id"] in ids], "categories": d["categories"]}


def source_sets(a, seg: str, work: str) -> tuple[dict, str, dict, str, str]:
    """(train COCO dict, its image folder, val COCO dict, its image folder,
    what) of the data --data names; val is train for coco --val-images 0."""
    if a.data == "synth":
        # The quickstart holds out a quarter as many images as it trains on,
        # drawn with another seed: ask for enough of both, keep the first.
        qs = os.path.join(work, "quickstart")
        n = max(a.images, 4 * a.val_images)
        subprocess.run([seg, "quickstart", "--dir", qs, "--images", str(n), "--epochs", "0"], check=True, capture_output=True)
        out = []
        for split, want in (("train", a.images), ("val", a.val_images)):
            root = os.path.join(qs, "dataset", split)
            d, ims = usable(os.path.join(root, "annotations", f"instances_{split}.json"), a.categories)
            if len(ims) < want:
                sys.exit(f"{root}: {len(ims)} images with an instance, want {want}")
            out += [restrict(d, ims[:want]), os.path.join(root, "images")]
        what = f"segpipe quickstart's easy synthetic set: {len(out[0]['images'])} training images, {len(out[2]['images'])} held out"
        return out[0], out[1], out[2], out[3], what
    ann = os.path.join(a.coco, "annotations", f"instances_{a.split}.json")
    imgs = os.path.join(a.coco, a.split)
    if not (os.path.isfile(ann) and os.path.isdir(imgs)):
        sys.exit(f"--data coco: no {ann} and {imgs} (--coco DIR)")
    d, ims = usable(ann, a.categories)
    if len(ims) < a.images + a.val_images:
        sys.exit(f"{ann}: only {len(ims)} images with a polygon instance of {a.categories}, want {a.images}+{a.val_images}")
    train = restrict(d, ims[: a.images])
    val = restrict(d, ims[a.images : a.images + a.val_images]) if a.val_images else train
    held = f"{a.val_images} held out" if a.val_images else "validated on the training images (an overfit)"
    return train, imgs, val, imgs, f"coco-tiny {a.split} ({os.path.realpath(a.coco)}), {a.categories}: {a.images} training images, {held}"


def write_yolo_split(coco: dict, image_dir: str, classes: dict, root: str, split: str) -> None:
    """images/SPLIT and labels/SPLIT of a YOLO-format data set."""
    import numpy as np
    from ultralytics.data.converter import merge_multi_segment

    im_dir, lb_dir = os.path.join(root, "images", split), os.path.join(root, "labels", split)
    os.makedirs(im_dir, exist_ok=True)
    os.makedirs(lb_dir, exist_ok=True)
    by_image: dict = {}
    for a in coco["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    for im in coco["images"]:
        shutil.copyfile(os.path.join(image_dir, im["file_name"]), os.path.join(im_dir, im["file_name"]))
        w, h = im["width"], im["height"]
        lines = []
        for a in by_image.get(im["id"], []):
            seg = a.get("segmentation")
            if a.get("iscrowd") or not isinstance(seg, list) or not seg:
                continue  # crowd regions: no YOLO counterpart (Ultralytics' converter drops them too)
            parts = [p for p in seg if len(p) >= 6]
            if not parts:
                continue
            if len(parts) > 1:
                poly = np.concatenate(merge_multi_segment(parts), axis=0)
            else:
                poly = np.array(parts[0], dtype=np.float64).reshape(-1, 2)
            poly = (poly / np.array([w, h])).clip(0, 1).reshape(-1)
            lines.append(" ".join([str(classes[a["category_id"]])] + [f"{v:.6f}" for v in poly]))
        stem = os.path.splitext(im["file_name"])[0]
        with open(os.path.join(lb_dir, stem + ".txt"), "w") as f:
            f.write("\n".join(lines) + ("\n" if lines else ""))


def yolo_folder(train: tuple, val: tuple | None, classes: dict, names: list, root: str) -> str:
    """A YOLO-format data set of (COCO dict, image folder) train and val
    (None: validate on train); returns its data YAML."""
    write_yolo_split(*train, classes, root, "train")
    if val is not None:
        write_yolo_split(*val, classes, root, "val")
    yaml = os.path.join(root, "data.yaml")
    with open(yaml, "w") as f:
        f.write(f"path: {root}\ntrain: images/train\nval: images/{'val' if val is not None else 'train'}\nnames:\n")
        for i, n in enumerate(names):
            f.write(f"  {i}: {json.dumps(n)}\n")
    return yaml


def convert(seg: str, gt_file: str, image_dir: str, out: str) -> list:
    """`segpipe convert coco` into out; returns its category table by index."""
    subprocess.run([seg, "convert", "coco", "--annotations", gt_file, "--images", image_dir, "--out", out], check=True, capture_output=True)
    with open(os.path.join(out, "manifest.json")) as f:
        return sorted(json.load(f)["categories"], key=lambda c: c["index"])


# -- scoring --------------------------------------------------------------------


def predictions(weights: str, coco: dict, image_dir: str, cat_of: list, imgsz: int) -> list:
    """COCO results (segm RLE and bbox) of a model on the set's images."""
    import numpy as np
    import pycocotools.mask as mask_util
    from ultralytics import YOLO

    model = YOLO(weights, task="segment")
    out = []
    for im in coco["images"]:
        r = model.predict(
            os.path.join(image_dir, im["file_name"]), imgsz=imgsz, conf=0.001, max_det=100, retina_masks=True, device="cpu", verbose=False
        )[0]
        if r.boxes is None or not len(r.boxes):
            continue
        boxes = r.boxes.xyxy.cpu().numpy()
        conf = r.boxes.conf.cpu().numpy()
        cls = r.boxes.cls.cpu().numpy().astype(int)
        masks = r.masks.data.cpu().numpy() > 0.5 if r.masks is not None else None
        if masks is not None and masks.shape[1:] != (im["height"], im["width"]):
            raise RuntimeError(f"mask size {masks.shape[1:]} for image {im['id']} of {im['height']}x{im['width']}")
        for j in range(len(boxes)):
            x1, y1, x2, y2 = (float(v) for v in boxes[j])
            rec = {"image_id": im["id"], "category_id": cat_of[cls[j]], "score": float(conf[j]), "bbox": [x1, y1, x2 - x1, y2 - y1]}
            if masks is not None:
                rle = mask_util.encode(np.asfortranarray(masks[j].astype(np.uint8)))
                rle["counts"] = rle["counts"].decode()
                rec["segmentation"] = rle
            out.append(rec)
    return out


def epoch_times(run_dir: str) -> list:
    """Seconds each epoch took, from Ultralytics' results.csv (its time
    column is cumulative; the last epoch includes the final validation)."""
    import csv

    with open(os.path.join(run_dir, "results.csv")) as f:
        t = [float(r["time"]) for r in csv.DictReader(f, skipinitialspace=True) if r.get("time")]
    return [round(b - a, 1) for a, b in zip([0.0] + t, t)]


def _ap(v: float) -> float | None:
    # COCOeval writes -1 where a size has no ground truth.
    return None if v < 0 else round(float(v), 4)


def score(gt_file: str, preds: list, image_ids: list, area_rng: list) -> dict:
    """pycocotools AP (0.50:0.95) and AP50 for masks and boxes, and mask AP
    of each size of area_rng (None where the set has no instance of it)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    res = {}
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(gt_file)
        for kind, key in (("segm", "mask"), ("bbox", "box")):
            have = [p for p in preds if kind == "bbox" or "segmentation" in p]
            if not have:
                res[f"{key}_map50"], res[f"{key}_map"] = 0.0, 0.0
                if key == "mask":
                    res.update(mask_ap_small=0.0, mask_ap_medium=0.0, mask_ap_large=0.0)
                continue
            dt = gt.loadRes([dict(p) for p in have])
            e = COCOeval(gt, dt, kind)
            e.params.imgIds = image_ids
            e.params.areaRng = area_rng  # labels stay all, small, medium, large
            e.evaluate()
            e.accumulate()
            e.summarize()
            res[f"{key}_map50"] = _ap(e.stats[1]) or 0.0
            res[f"{key}_map"] = _ap(e.stats[0]) or 0.0
            if key == "mask":
                res["mask_ap_small"], res["mask_ap_medium"], res["mask_ap_large"] = (_ap(e.stats[i]) for i in (3, 4, 5))
    res["detections"] = len(preds)
    return res


# -- main -----------------------------------------------------------------------


def mask_rule_trainer(base: type, rule: str | None) -> type:
    """base (SegpipeSegmentationTrainer) whose training stream asks for
    mask_rule ``rule`` (None: the server's default, for a segpipe without
    the setting). Ultralytics refuses arguments it does not have, so the
    rule goes into the loader's augment settings, which the request
    carries."""
    if rule is None:
        return base

    class Trainer(base):
        def get_dataloader(self, dataset_path, batch_size=16, rank=0, mode="train"):
            loader = super().get_dataloader(dataset_path, batch_size, rank, mode)
            if mode == "train":
                loader.augment["mask_rule"] = rule
            return loader

    Trainer.__name__ = Trainer.__qualname__ = f"{base.__name__}_{rule}"
    return Trainer


def plan_loaders(loaders: list, table: dict, copy_paste: float) -> tuple[list, list]:
    """(runnable, notes): each loader of ``loaders`` as (name, mask rule to
    ask for or None) given the installed segpipe's augmentation table, and a
    note for each one left out. Exits when copy_paste is asked for and a
    segpipe loader cannot honour it."""
    run, notes = [], []
    has_rule = "mask_rule" in table
    for name in loaders:
        if name == "ultralytics":
            run.append((name, None))
            continue
        if copy_paste > 0 and "copy_paste" not in table:
            sys.exit(
                f"--copy-paste {copy_paste}: the installed segpipe's augmentation table has no copy_paste, so {name} "
                "cannot run the recipe; pass --copy-paste 0 to compare without it"
            )
        rule = name.split("-", 1)[1]
        if has_rule:
            run.append((name, rule))
        elif rule == "exact":
            run.append((name, None))
            notes.append(f"{name}: this segpipe has no mask_rule setting; its masks follow its only rule, exact")
        else:
            notes.append(f"{name}: skipped, this segpipe has no mask_rule setting (segpipe._augment.AUGMENT_TYPES)")
    return run, notes


def main(argv=None) -> int:
    a = parse_args(argv)
    t_start = time.time()
    work = a.workdir or tempfile.mkdtemp(prefix="segpipe-ul-map-")
    os.makedirs(work, exist_ok=True)
    cfg = os.path.join(work, "yolo-config")
    os.makedirs(cfg, exist_ok=True)
    os.environ["YOLO_CONFIG_DIR"] = cfg
    os.environ["YOLO_OFFLINE"] = "true"
    os.environ.setdefault("YOLO_VERBOSE", "false")

    import matplotlib
    import torch
    import ultralytics
    from ultralytics import YOLO
    from ultralytics.utils import USER_CONFIG_DIR

    import segpipe.ultralytics as sul
    from segpipe._augment import AUGMENT_TYPES

    font = os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf", "DejaVuSans.ttf")
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        if not os.path.exists(USER_CONFIG_DIR / name):
            shutil.copyfile(font, USER_CONFIG_DIR / name)
    torch.set_num_threads(a.threads)
    warn = sul.check_version()
    if warn:
        log(warn)
    loaders, notes = plan_loaders(a.loader_list, AUGMENT_TYPES, a.copy_paste)
    for n in notes:
        log(n)

    seg = segpipe_binary(a.segpipe, work)
    train, train_imgs, val, val_imgs, what = source_sets(a, seg, work)
    held_out = val is not train
    gt_train, gt_val = os.path.join(work, "train.json"), os.path.join(work, "val.json")
    for path, d in ((gt_train, train), (gt_val, val)):
        with open(path, "w") as f:
            json.dump(d, f)
    shards = os.path.join(work, "shards")
    cats = convert(seg, gt_train, train_imgs, os.path.join(shards, "train"))
    if held_out and convert(seg, gt_val, val_imgs, os.path.join(shards, "val")) != cats:
        sys.exit("the training and validation shard sets have different category tables")
    classes = {c["id"]: c["index"] for c in cats}  # the class indices segpipe serves, used for both
    names = [c["name"] for c in cats]
    cat_of = [c["id"] for c in cats]
    data_yaml = yolo_folder((train, train_imgs), (val, val_imgs) if held_out else None, classes, names, os.path.join(work, "yolo"))
    val_ids = [im["id"] for im in val["images"]]
    n_inst = sum(1 for x in val["annotations"] if not x.get("iscrowd"))
    if a.size_split == "terciles":
        a.size_split = tercile_split(val)
    a.area_rng = area_ranges(a.size_split)
    sizes = size_counts(val, a.area_rng)
    log(f"{what}; scored on {len(val_ids)} images, {n_inst} instances (sizes {sizes})")

    import harness

    os.environ["SEGPIPE_BINARY"] = seg
    server = harness.Server(root=shards, log=os.path.join(work, "serve.log")).start()
    source = f"segpipe://127.0.0.1:{server.port}/train?val={'val' if held_out else 'train'}"
    settings = dict(
        epochs=a.epochs,
        imgsz=a.imgsz,
        batch=a.batch,
        nbs=a.nbs or a.batch,
        optimizer=a.optimizer,
        lr0=a.lr0,
        warmup_epochs=a.warmup_epochs,
        mosaic=a.mosaic,
        close_mosaic=0,
        copy_paste=a.copy_paste,
        copy_paste_mode="flip",
        overlap_mask=True,
        val=False,
        workers=0,
        device="cpu",
        amp=False,
        plots=False,
        deterministic=True,
        exist_ok=True,
        verbose=False,
    )
    runs = []
    try:
        # Seed-major: a slow spell of a shared machine falls on every loader.
        for seed in a.seed_list:
            for loader, rule in loaders:
                name = f"{loader}-seed{seed}"
                log(f"train {name}")
                t0 = time.time()
                model = YOLO("yolo26n-seg.yaml", task="segment")
                kw = dict(settings, seed=seed, project=os.path.join(work, "runs"), name=name)
                if loader == "ultralytics":
                    model.train(data=data_yaml, **kw)
                else:
                    model.train(trainer=mask_rule_trainer(sul.SegpipeSegmentationTrainer, rule), data=source, **kw)
                train_s = time.time() - t0
                run_dir = str(model.trainer.save_dir)
                rec = {"loader": loader, "mask_rule": rule, "seed": seed, "train_s": round(train_s, 1), "epoch_s": epoch_times(run_dir)}
                t1 = time.time()
                rec["last"] = score(gt_val, predictions(os.path.join(run_dir, "weights", "last.pt"), val, val_imgs, cat_of, a.imgsz), val_ids, a.area_rng)
                rec["score_s"] = round(time.time() - t1, 1)
                if loader != "ultralytics":
                    tl = model.trainer.train_loader
                    rec["segpipe_batches_streamed"] = tl.batches_streamed
                    aug = getattr(tl.streams[-1].request, "augment", None) if tl.streams else None
                    rec["segpipe_augment"] = dict(aug) if aug else None  # what the server was asked for
                rec["wall_s"] = round(time.time() - t0, 1)
                log(f"{name}: {rec['last']} in {rec['wall_s']} s")
                runs.append(rec)
    finally:
        server.stop()

    summary = summarise(runs)

    def ver(mod):
        try:
            return __import__(mod).__version__
        except Exception:  # noqa: BLE001 - reported as missing
            return None

    seg_ver = subprocess.run([seg, "--version"], capture_output=True, text=True).stdout.strip()
    result = {
        "what": "YOLO26n-seg from yolo26n-seg.yaml trained by Ultralytics with its own loader and through segpipe with each mask rule; "
        "final models scored by pycocotools on Ultralytics predictions (conf 0.001, max_det 100, masks at image size); mean ± sample sd over seeds",
        "quick": a.quick,
        "data": {
            "source": what,
            "train_images": len(train["images"]),
            "val_images": len(val_ids),
            "held_out": held_out,
            "val_image_ids": val_ids,
            "val_instances": n_inst,
            "val_instances_by_size": sizes,
            "size_split_sqrt_area_px": a.size_split,
            "categories": names,
        },
        "settings": dict(settings, seeds=a.seed_list, threads=a.threads, model="yolo26n-seg.yaml"),
        "notes": notes,
        "versions": {
            "ultralytics": ultralytics.__version__,
            "torch": torch.__version__,
            "pyarrow": ver("pyarrow"),
            "pycocotools": ver("pycocotools") or _dist_version("pycocotools"),
            "numpy": ver("numpy"),
            "python": platform.python_version(),
            "segpipe": seg_ver,
            "segpipe_augment_table_has": {k: k in AUGMENT_TYPES for k in ("copy_paste", "mask_rule")},
            "cpu": _cpu(),
        },
        "runs": runs,
        "summary": summary,
        "wall_s": round(time.time() - t_start, 1),
    }
    out = a.out or os.path.join(work, "ultralytics-map.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(table(summary))
    for n in notes:
        print(f"note: {n}")
    print(f"{what}; scored on {len(val_ids)} images, {n_inst} instances {sizes}; seeds {a.seed_list}; {result['wall_s']} s")
    log(f"wrote {out} (work folder {work} kept)")
    return 0


def _dist_version(name: str):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.+)", f.read())
        return f"{m.group(1).strip() if m else platform.processor()}, {os.cpu_count()} cores"
    except OSError:
        return f"{platform.processor()}, {os.cpu_count()} cores"


if __name__ == "__main__":
    sys.exit(main())
