"""The `ultralytics` mask rule against Ultralytics' own polygon2mask
(cv2.fillPoly of the np.int32 vertices, then cv2.resize): cell for cell on
every coco-tiny polygon instance, letterboxed to 640 and at the image's own
size, and on fuzzed polygons at strides 1 to 8.

segpipe's side is pipeline/raster through its windowed form (the
internal/rulecheck helper, which also holds it equal to the dense form),
built with `go build` unless SEGPIPE_RULECHECK names a binary. An instance
of several rings is the union of one fillPoly per ring, as the rule's doc
says; a one-ring instance goes through ultralytics.data.utils.polygon2mask
itself when Ultralytics imports.

Needs numpy and cv2 (opencv-python); the coco-tiny cases also
/work/shared/data/coco-tiny.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import unittest

import _path
import harness
from overfit import offline_ultralytics

COCO_TINY = os.environ.get("COCO_TINY", os.path.join(_path.REPO, "..", "shared", "data", "coco-tiny"))


def _need(cond: bool, why: str) -> None:
    if not cond:
        if harness.REQUIRED:
            raise AssertionError(why + " (SEGPIPE_REQUIRE_STACK=1)")
        raise unittest.SkipTest(why)


def rulecheck() -> str:
    b = os.environ.get("SEGPIPE_RULECHECK")
    if b:
        return b
    _need(shutil.which("go") is not None, "no rulecheck helper: set SEGPIPE_RULECHECK or put go on PATH")
    b = os.path.join(harness.workdir(), "rulecheck")
    if not os.path.exists(b):
        p = subprocess.run(["go", "build", "-o", b, "./pipeline/raster/internal/rulecheck"], cwd=_path.REPO, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"go build rulecheck failed: {p.stderr[-2000:]}")
    return b


def segpipe_masks(w: int, h: int, stride: int, instances: list[list[list[float]]]):
    """The ultralytics rule's (n, h//stride, w//stride) masks."""
    import numpy as np

    req = {"rule": "ultralytics", "w": w, "h": h, "stride": stride, "instances": instances}
    p = subprocess.run([rulecheck()], input=json.dumps(req).encode(), capture_output=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"rulecheck exited {p.returncode}: {p.stderr.decode()[-1500:]}")
    return np.frombuffer(p.stdout, np.uint8).reshape(len(instances), h // stride, w // stride)


def reference_mask(w: int, h: int, stride: int, rings: list[list[float]]):
    """polygon2mask's result: Ultralytics' own function for one ring, and
    for several one fillPoly per ring on the same canvas, then the same
    resize."""
    import cv2
    import numpy as np

    if len(rings) == 1 and len(rings[0]) >= 2:
        try:
            from ultralytics.data.utils import polygon2mask
        except ImportError:
            polygon2mask = None
        if polygon2mask is not None:
            return polygon2mask((h, w), [np.asarray(rings[0], dtype=np.float32)], color=1, downsample_ratio=stride)
    canvas = np.zeros((h, w), np.uint8)
    for r in rings:
        pts = np.asarray(r, dtype=np.float32)[: len(r) // 2 * 2].astype(np.int32).reshape(1, -1, 2)
        if pts.shape[1]:
            cv2.fillPoly(canvas, pts, color=1)
    return cv2.resize(canvas, (w // stride, h // stride))


def f32(v) -> float:
    import numpy as np

    return float(np.float32(v))


class MaskRuleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for m in ("numpy", "cv2"):
            try:
                __import__(m)
            except ImportError as e:
                _need(False, f"{m} does not import: {e}")
        offline_ultralytics()  # polygon2mask itself where Ultralytics imports
        rulecheck()

    def compare(self, w, h, stride, instances):
        """(instances differing, cells differing, cells compared)."""
        got = segpipe_masks(w, h, stride, instances)
        bad_inst = bad_cells = 0
        for i, rings in enumerate(instances):
            want = reference_mask(w, h, stride, rings)
            d = int((got[i] != want).sum())
            bad_cells += d
            bad_inst += d > 0
        return bad_inst, bad_cells, got.size

    def coco(self):
        _need(os.path.isdir(COCO_TINY), f"{COCO_TINY} is absent")
        out = []
        for split in ("train2017", "val2017"):
            path = os.path.join(COCO_TINY, "annotations", f"instances_{split}.json")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                d = json.load(f)
            images = {im["id"]: im for im in d["images"]}
            for a in d["annotations"]:
                seg = a["segmentation"]
                if isinstance(seg, list) and seg:
                    im = images[a["image_id"]]
                    out.append((im["width"], im["height"], seg))
        self.assertGreater(len(out), 0, "no polygon instances in coco-tiny")
        return out

    def test_coco_tiny_letterboxed_640_matches_polygon2mask(self):
        insts = []
        for w, h, seg in self.coco():
            s = 640 / max(w, h)
            px, py = (640 - s * w) / 2, (640 - s * h) / 2
            insts.append([[f32(v * s + (py if k % 2 else px)) for k, v in enumerate(r)] for r in seg])
        bad_inst, bad_cells, cells = self.compare(640, 640, 4, insts)
        print(f"\ncoco-tiny at 640: {len(insts)} instances, {bad_inst} differ, {bad_cells} of {cells} cells differ")
        self.assertEqual((bad_inst, bad_cells), (0, 0))

    def test_coco_tiny_at_image_size_matches_polygon2mask(self):
        by_size: dict = {}
        for w, h, seg in self.coco():
            by_size.setdefault((w // 4 * 4, h // 4 * 4), []).append([[f32(v) for v in r] for r in seg])
        n = bad_inst = bad_cells = cells = 0
        for (w, h), insts in by_size.items():
            bi, bc, c = self.compare(w, h, 4, insts)
            n, bad_inst, bad_cells, cells = n + len(insts), bad_inst + bi, bad_cells + bc, cells + c
        print(f"\ncoco-tiny at image size: {n} instances, {bad_inst} differ, {bad_cells} of {cells} cells differ")
        self.assertEqual((bad_inst, bad_cells), (0, 0))

    def test_fuzzed_polygons_match_fillpoly_and_resize(self):
        import numpy as np

        rng = np.random.default_rng(37)
        groups: dict = {}
        for _ in range(3000):
            stride = int(rng.choice([4, 4, 4, 4, 1, 2, 3, 5, 6, 8]))
            # Few canvas sizes, so that one helper run takes many instances.
            w, h = (stride * int(rng.choice([1, 2, 5, 13, 47])) for _ in range(2))
            rings = []
            for _ in range(1 if rng.random() < 0.8 else int(rng.integers(2, 4))):
                n = int(rng.integers(1, 16))
                kind = int(rng.integers(0, 3))
                if kind == 0:  # anywhere, edges leaving the canvas
                    pts = rng.uniform(-0.3 * max(w, h) - 5, 1.3 * max(w, h) + 5, size=2 * n)
                elif kind == 1:  # a star-shaped outline, as traced objects are
                    cx, cy, rad = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.3, max(w, h) / 2)
                    a = np.sort(rng.uniform(0, 2 * np.pi, n))
                    rr = rad * rng.uniform(0.4, 1, n)
                    pts = np.stack([cx + rr * np.cos(a), cy + rr * np.sin(a)], 1).ravel()
                else:  # near-integer vertices, where truncation and ties bite
                    pts = rng.integers(-3, max(w, h) + 3, size=2 * n) + rng.choice([0.0, 0.5, 0.999, -0.001], 2 * n)
                rings.append([f32(v) for v in pts])
            groups.setdefault((w, h, stride), []).append(rings)
        n = bad_inst = bad_cells = cells = 0
        for (w, h, stride), insts in groups.items():
            bi, bc, c = self.compare(w, h, stride, insts)
            n, bad_inst, bad_cells, cells = n + len(insts), bad_inst + bi, bad_cells + bc, cells + c
        print(f"\nfuzzed: {n} instances on {len(groups)} canvases, {bad_inst} differ, {bad_cells} of {cells} cells differ")
        self.assertEqual((bad_inst, bad_cells), (0, 0))


if __name__ == "__main__":
    unittest.main()
