#!/usr/bin/env python3
"""Ultralytics' own loader against segpipe on the same images: mask and box mAP50.

Trains YOLO26n-seg from yolo26n-seg.yaml (no pretrained weights) with
Ultralytics twice per repeat, on the same COCO images with the same settings
and seed:

- "ultralytics": Ultralytics' own loader, on a YOLO-format folder this script
  writes from the COCO annotations (one label line per non-crowd instance,
  polygon normalised by the image size; an instance of several parts is
  joined into one polygon by Ultralytics' own merge_multi_segment, as its
  COCO converter does);
- "segpipe": `segpipe convert coco` of the same annotations, `segpipe serve`
  on loopback and segpipe.ultralytics.SegpipeSegmentationTrainer.

The val set is the training set (an overfit: the figure says whether the
model learns the same from both loaders, not how well it generalises). Each
final model (last.pt) and each best.pt predicts the val images through
Ultralytics' predictor (same code for both loaders, conf 0.001, at most 100
detections an image, masks at the image's own size), and pycocotools scores
the predictions against the COCO annotations (crowd regions ignored, as
COCOeval does): AP at IoU 0.50 and AP 0.50:0.95, masks and boxes.

Repeat i trains both loaders with seed --seed + i * --seed-step: the spread
over repeats is the run-to-run noise the difference between the loaders is
to be read against (--seed-step 0 reruns the same seed).

Data: ../shared/data/coco-tiny (val2017) beside the repository when present
(--coco DIR to choose), else `segpipe synth`. The annotations are cut to
--categories (default person: a model trained from scratch for minutes on a
CPU learns one class of a few images, while on all 80 COCO classes it
detects nothing yet) and the first --images images by id with at least one
non-crowd instance of them are used.

    python3 scripts/ultralytics-map.py --images 16 --imgsz 320 --epochs 60 --repeats 2

The defaults make it an overfit that learns within about five minutes a run
on two CPU cores: batch 4 with nbs 4 (an optimiser step every batch;
Ultralytics' default nbs 64 would step once every 16 batches, a handful of
steps in all), AdamW at lr0 0.004, one warm-up epoch, mosaic off (with it,
and at 0.002, 25 epochs left box mAP50 near 0.01 and masks at 0); the rest
are Ultralytics' defaults (HSV, horizontal flips, scale, translate), the
same for both loaders. --mosaic 1 --close-mosaic N turn mosaic on for a
longer run.

Needs torch, ultralytics (segpipe.ultralytics.ULTRALYTICS_REQUIREMENT),
pyarrow, pycocotools and a segpipe binary (--segpipe, $SEGPIPE_BINARY, segpipe
on PATH, or go to build one). Writes the JSON to --out and prints it. Nothing
is downloaded (YOLO_OFFLINE, a config folder of its own with a font
matplotlib ships for the plots Ultralytics draws).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--coco", default=os.path.join(REPO, "..", "shared", "data", "coco-tiny"), help="coco-tiny folder (annotations/instances_val2017.json, val2017/)")
    p.add_argument("--split", default="val2017", help="split of --coco to take the images from")
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--categories", default="person", help="comma-separated category names to keep (all: every category)")
    p.add_argument("--imgsz", type=int, default=320)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--nbs", type=int, default=0, help="nominal batch size (default: --batch, so that every batch is an optimiser step)")
    p.add_argument("--optimizer", default="AdamW")
    p.add_argument("--lr0", type=float, default=0.004)
    p.add_argument("--warmup-epochs", type=float, default=1.0)
    p.add_argument("--mosaic", type=float, default=0.0)
    p.add_argument("--close-mosaic", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seed-step", type=int, default=1, help="seed of repeat i: seed + i*seed-step")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--loaders", default="ultralytics,segpipe")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1), help="torch threads")
    p.add_argument("--segpipe", default=os.environ.get("SEGPIPE_BINARY", ""), help="segpipe binary")
    p.add_argument("--workdir", default="", help="folder for data, shards and runs (default: a temporary one, removed)")
    p.add_argument("--out", default="", help="JSON result file (default: WORKDIR/ultralytics-map.json)")
    return p.parse_args(argv)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- data ---------------------------------------------------------------------


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


def source_set(a, seg: str, work: str) -> tuple[str, str, str]:
    """(annotations file, image folder, what) of the source data."""
    ann = os.path.join(a.coco, "annotations", f"instances_{a.split}.json")
    imgs = os.path.join(a.coco, a.split)
    if os.path.isfile(ann) and os.path.isdir(imgs):
        return ann, imgs, f"coco-tiny {a.split} ({os.path.realpath(a.coco)})"
    out = os.path.join(work, "synth")
    subprocess.run([seg, "synth", "--out", out, "--images", str(max(a.images, 16)), "--seed", "1"], check=True, capture_output=True)
    return os.path.join(out, "annotations", "instances_train.json"), os.path.join(out, "images"), "segpipe synth --seed 1"


def subset(ann_file: str, n: int, categories: str) -> dict:
    """The first n images by id with at least one non-crowd polygon instance
    of the kept categories, with those categories' annotations (crowd ones
    too: COCOeval ignores what they cover)."""
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
    usable = {a["image_id"] for a in anns if not a.get("iscrowd") and isinstance(a.get("segmentation"), list) and a["segmentation"]}
    images = sorted((im for im in d["images"] if im["id"] in usable), key=lambda im: im["id"])[:n]
    if len(images) < n:
        sys.exit(f"{ann_file}: only {len(images)} images with a polygon instance of {categories}, want {n}")
    ids = {im["id"] for im in images}
    return {"images": images, "annotations": [a for a in anns if a["image_id"] in ids], "categories": cats}


def yolo_folder(coco: dict, image_dir: str, classes: dict, names: list, root: str) -> str:
    """A YOLO-format data set of the COCO subset (train = val = the same
    images); returns its data YAML."""
    import numpy as np
    from ultralytics.data.converter import merge_multi_segment

    im_dir, lb_dir = os.path.join(root, "images", "train"), os.path.join(root, "labels", "train")
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
    yaml = os.path.join(root, "data.yaml")
    with open(yaml, "w") as f:
        f.write(f"path: {root}\ntrain: images/train\nval: images/train\nnames:\n")
        for i, n in enumerate(names):
            f.write(f"  {i}: {json.dumps(n)}\n")
    return yaml


# -- scoring ------------------------------------------------------------------


def predictions(weights: str, coco: dict, image_dir: str, cat_of: list, imgsz: int) -> list:
    """COCO results (segm RLE and bbox) of a model on the subset's images."""
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


def score(gt_file: str, preds: list, image_ids: list) -> dict:
    """pycocotools AP50 and AP (0.50:0.95) for masks and boxes."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    res = {}
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(gt_file)
        for kind, key in (("segm", "mask"), ("bbox", "box")):
            have = [p for p in preds if kind == "bbox" or "segmentation" in p]
            if not have:
                res[f"{key}_map50"], res[f"{key}_map"] = 0.0, 0.0
                continue
            dt = gt.loadRes([dict(p) for p in have])
            e = COCOeval(gt, dt, kind)
            e.params.imgIds = image_ids
            e.evaluate()
            e.accumulate()
            e.summarize()
            res[f"{key}_map50"] = round(max(float(e.stats[1]), 0.0), 4)
            res[f"{key}_map"] = round(max(float(e.stats[0]), 0.0), 4)
    res["detections"] = len(preds)
    return res


def last_val_row(run_dir: str) -> dict:
    import csv

    with open(os.path.join(run_dir, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    row = rows[-1] if rows else {}
    keep = ("metrics/mAP50(M)", "metrics/mAP50(B)", "metrics/mAP50-95(M)", "metrics/mAP50-95(B)")
    return {k.strip(): round(float(v), 4) for k, v in row.items() if k.strip() in keep}


# -- main ---------------------------------------------------------------------


def main(argv=None) -> int:
    a = parse_args(argv)
    t_start = time.time()
    own_work = not a.workdir
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

    font = os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf", "DejaVuSans.ttf")
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        if not os.path.exists(USER_CONFIG_DIR / name):
            shutil.copyfile(font, USER_CONFIG_DIR / name)
    torch.set_num_threads(a.threads)
    warn = sul.check_version()
    if warn:
        log(warn)

    seg = segpipe_binary(a.segpipe, work)
    ann_src, img_src, what = source_set(a, seg, work)
    coco = subset(ann_src, a.images, a.categories)
    gt_file = os.path.join(work, "subset.json")
    with open(gt_file, "w") as f:
        json.dump(coco, f)
    shards = os.path.join(work, "shards")
    subprocess.run(
        [seg, "convert", "coco", "--annotations", gt_file, "--images", img_src, "--out", os.path.join(shards, "train")],
        check=True,
        capture_output=True,
    )
    with open(os.path.join(shards, "train", "manifest.json")) as f:
        cats = sorted(json.load(f)["categories"], key=lambda c: c["index"])
    classes = {c["id"]: c["index"] for c in cats}  # the class indices segpipe serves, used for both
    names = [c["name"] for c in cats]
    cat_of = [c["id"] for c in cats]
    data_yaml = yolo_folder(coco, img_src, classes, names, os.path.join(work, "yolo"))
    image_ids = [im["id"] for im in coco["images"]]
    n_inst = sum(1 for x in coco["annotations"] if not x.get("iscrowd"))
    log(f"{len(image_ids)} images, {n_inst} instances (+{len(coco['annotations']) - n_inst} crowd) from {what}")

    import harness

    os.environ["SEGPIPE_BINARY"] = seg
    server = harness.Server(root=shards, log=os.path.join(work, "serve.log")).start()
    settings = dict(
        epochs=a.epochs,
        imgsz=a.imgsz,
        batch=a.batch,
        nbs=a.nbs or a.batch,
        optimizer=a.optimizer,
        lr0=a.lr0,
        warmup_epochs=a.warmup_epochs,
        mosaic=a.mosaic,
        close_mosaic=a.close_mosaic,
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
        for i in range(a.repeats):
            seed = a.seed + i * a.seed_step
            for loader in [x.strip() for x in a.loaders.split(",") if x.strip()]:
                name = f"{loader}-{i}"
                log(f"train {name} (seed {seed})")
                t0 = time.time()
                model = YOLO("yolo26n-seg.yaml", task="segment")
                kw = dict(settings, seed=seed, project=os.path.join(work, "runs"), name=name)
                if loader == "ultralytics":
                    model.train(data=data_yaml, **kw)
                elif loader == "segpipe":
                    model.train(trainer=sul.SegpipeSegmentationTrainer, data=f"segpipe://127.0.0.1:{server.port}/train?val=train", **kw)
                else:
                    sys.exit(f"unknown loader {loader!r}")
                train_s = time.time() - t0
                run_dir = str(model.trainer.save_dir)
                rec = {"loader": loader, "repeat": i, "seed": seed, "train_s": round(train_s, 1)}
                for w in ("last", "best"):
                    path = os.path.join(run_dir, "weights", f"{w}.pt")
                    if os.path.exists(path):
                        rec[w] = score(gt_file, predictions(path, coco, img_src, cat_of, a.imgsz), image_ids)
                rec["ultralytics_val_last_epoch"] = last_val_row(run_dir)
                if loader == "segpipe":
                    tl = model.trainer.train_loader
                    rec["segpipe_batches_streamed"] = tl.batches_streamed
                rec["wall_s"] = round(time.time() - t0, 1)
                log(f"{name}: last {rec.get('last')} best {rec.get('best')} in {rec['wall_s']} s")
                runs.append(rec)
    finally:
        server.stop()

    summary: dict = {}
    for loader in sorted({r["loader"] for r in runs}):
        rs = [r for r in runs if r["loader"] == loader]
        s = {}
        for w in ("last", "best"):
            for k in ("mask_map50", "box_map50", "mask_map", "box_map"):
                vals = [r[w][k] for r in rs if w in r]
                if vals:
                    s[f"{w}_{k}"] = {"mean": round(sum(vals) / len(vals), 4), "min": min(vals), "max": max(vals), "runs": vals}
        s["train_s"] = [r["train_s"] for r in rs]
        summary[loader] = s

    def ver(mod):
        try:
            return __import__(mod).__version__
        except Exception:  # noqa: BLE001 - reported as missing
            return None

    seg_ver = subprocess.run([seg, "--version"], capture_output=True, text=True).stdout.strip()
    result = {
        "what": "YOLO26n-seg from yolo26n-seg.yaml trained by Ultralytics with its own loader and through segpipe; "
        "val = train images; scored by pycocotools on Ultralytics predictions (conf 0.001, max_det 100, masks at image size)",
        "data": {"source": what, "categories_kept": a.categories, "images": len(image_ids), "image_ids": image_ids, "instances": n_inst, "categories": len(cats)},
        "settings": dict(settings, seeds=[a.seed + i * a.seed_step for i in range(a.repeats)], threads=a.threads, model="yolo26n-seg.yaml"),
        "versions": {
            "ultralytics": ultralytics.__version__,
            "torch": torch.__version__,
            "pyarrow": ver("pyarrow"),
            "pycocotools": ver("pycocotools") or _dist_version("pycocotools"),
            "numpy": ver("numpy"),
            "python": platform.python_version(),
            "segpipe": seg_ver,
            "cpu": _cpu(),
        },
        "runs": runs,
        "summary": summary,
        "wall_s": round(time.time() - t_start, 1),
    }
    out = a.out or os.path.join(work, "ultralytics-map.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    log(f"wrote {out}")
    if own_work and not a.out:
        log(f"kept {work} (holds the JSON)")
    elif own_work:
        shutil.rmtree(work, True)
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
