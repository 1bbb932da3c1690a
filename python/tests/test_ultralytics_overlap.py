"""overlap_mask=True in the Ultralytics adapter: the per-image index maps
(segpipe.ultralytics.overlap_masks) against Ultralytics' own
polygons2masks_overlap given the same per-instance masks (its polygon2mask
patched to return them), on crafted overlapping squares and on coco-tiny
through the in-process Loader; and Ultralytics' segmentation losses on both
mask forms.

Needs torch and ultralytics; the coco-tiny case also the segpipe binary
(SEGPIPE_BINARY) and library (SEGPIPE_LIBRARY).
"""

from __future__ import annotations

import os
import tempfile
import unittest
from unittest import mock

import _path  # noqa: F401
import harness
from overfit import offline_ultralytics

COCO_TINY = "/work/shared/data/coco-tiny"


def ultralytics_overlap(planes):
    """polygons2masks_overlap of one image's instance planes (m, Hp, Wp):
    each "segment" is an instance's index, which the patched polygon2mask
    turns into its plane."""
    import numpy as np
    import ultralytics.data.utils as du

    hp, wp = planes.shape[-2:]
    segs = [np.array([i, 0.0], dtype=np.float32) for i in range(planes.shape[0])]
    with mock.patch.object(du, "polygon2mask", lambda imgsz, polys, downsample_ratio=1, color=1: planes[int(polys[0][0])].copy()):
        return du.polygons2masks_overlap((hp * 4, wp * 4), segs, downsample_ratio=4)


class OverlapTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.require("torch", "ultralytics")
        offline_ultralytics()

    def check_batch(self, masks, batch_idx, n):
        """overlap_masks of a batch equals Ultralytics' per image; returns
        the images compared."""
        import numpy as np
        import torch

        from segpipe.ultralytics import overlap_masks

        maps, order = overlap_masks(masks, batch_idx, n)
        counts = torch.bincount(batch_idx.long(), minlength=n).tolist()
        self.assertEqual(maps.dtype, torch.int32 if max(counts, default=0) > 255 else torch.uint8)
        sbi = batch_idx.long()[order]
        self.assertTrue(bool((sbi[1:] >= sbi[:-1]).all()), "order groups the instances by image")
        first = 0
        for i in range(n):
            planes = masks[batch_idx.long() == i].numpy().astype(np.uint8)
            local = (order[first : first + counts[i]] - int((batch_idx.long() < i).sum())).numpy()
            first += counts[i]
            if not counts[i]:
                self.assertEqual(int(maps[i].max()), 0)
                continue
            area = planes.reshape(len(planes), -1).sum(1).astype(np.int64)
            nonempty = area[local][area[local] > 0]
            self.assertTrue((np.diff(nonempty) <= 0).all(), f"image {i}: not sorted by area descending")
            self.assertTrue((area[local][: counts[i] - len(nonempty)] == 0).all(), f"image {i}: empty masks not first")
            got = maps[i].numpy()
            # The rule itself, brute force: instances painted in that order,
            # each its 1-based place, so the smallest covering one wins.
            paint = np.zeros(planes.shape[1:], dtype=np.int64)
            for j, idx in enumerate(local):
                paint[planes[idx] > 0] = j + 1
            np.testing.assert_array_equal(got.astype(np.int64), paint, err_msg=f"image {i}: against the rule")
            if counts[i] > 128:
                # Past 128 instances Ultralytics' own result differs between
                # its releases (8.4.2 adds index and mask in uint8 before it
                # clips, which overflows); the rule above decides there.
                continue
            want, index = ultralytics_overlap(planes)
            if (index == local).all():
                np.testing.assert_array_equal(got, want, err_msg=f"image {i}")
            else:
                # Ties in area: numpy's argsort orders them as it likes. Both
                # maps must still name, at every pixel, an instance of the
                # same area (the smallest covering one).
                np.testing.assert_array_equal(area[index], area[local], err_msg=f"image {i}: {index} {local}")
                a = np.where(got > 0, area[local][np.maximum(got.astype(np.int64) - 1, 0)], -1)
                b = np.where(want > 0, area[index][np.maximum(want.astype(np.int64) - 1, 0)], -1)
                np.testing.assert_array_equal(a, b, err_msg=f"image {i}")
        return n

    def test_crafted_overlapping_squares(self):
        import torch

        hp = wp = 16
        sq = lambda x0, y0, x1, y1: torch.zeros(hp, wp, dtype=torch.uint8).index_fill_(0, torch.arange(y0, y1), 1) * torch.zeros(hp, wp, dtype=torch.uint8).index_fill_(1, torch.arange(x0, x1), 1)  # noqa: E731
        planes = [
            sq(0, 0, 12, 12), sq(2, 2, 8, 8), sq(4, 4, 6, 6), sq(10, 10, 16, 16),  # image 0: nested, and one across
            sq(0, 0, 4, 4), sq(3, 3, 10, 10),  # image 1: the larger one listed last
            sq(1, 1, 5, 5), sq(6, 6, 10, 10), sq(8, 8, 12, 12),  # image 3 (image 2 has none): equal areas overlapping
        ]  # fmt: skip
        masks = torch.stack(planes)
        batch_idx = torch.tensor([0, 0, 0, 0, 1, 1, 3, 3, 3], dtype=torch.float32)
        self.check_batch(masks, batch_idx, 4)
        from segpipe.ultralytics import overlap_masks

        maps, order = overlap_masks(masks, batch_idx, 4)
        self.assertEqual(order.tolist(), [0, 1, 3, 2, 5, 4, 6, 7, 8])
        self.assertEqual((int(maps[0, 5, 5]), int(maps[0, 3, 3]), int(maps[0, 11, 11]), int(maps[0, 14, 14])), (4, 2, 3, 3))
        self.assertEqual(int(maps[3, 9, 9]), 3, "equal areas: the later instance in stream order wins")

    def test_more_than_255_instances_widen_to_int32(self):
        import torch

        g = torch.Generator().manual_seed(0)
        masks = (torch.rand(300, 8, 8, generator=g) < 0.05).to(torch.uint8)
        masks[:, 0, 0] = 1  # every instance covers one shared pixel
        masks[7] = 0
        masks[7, 0, 0] = 1  # the smallest: it wins the shared pixel
        self.check_batch(masks, torch.zeros(300), 1)
        self.check_batch(masks, torch.tensor([0.0] * 250 + [1.0] * 50), 2)

    def test_coco_tiny_through_the_loader(self):
        from segpipe.loader import library_path

        if not os.path.isdir(COCO_TINY) or not os.path.exists(library_path()):
            self.skipTest(f"needs coco-tiny ({COCO_TINY}) and the loader library ({library_path()})")
        import torch

        from segpipe import Loader
        from segpipe.ultralytics import ultralytics_batch

        out = os.path.join(tempfile.mkdtemp(prefix="segpipe-overlap-"), "val")
        harness.run("convert", "coco", "--annotations", f"{COCO_TINY}/annotations/instances_val2017.json",
                    "--images", f"{COCO_TINY}/val2017", "--out", out)  # fmt: skip
        images = instances = 0
        with Loader(out, batch_size=16, imgsz=640, val=True, masks="dense", workers=2) as loader:
            for b in loader:
                ub = ultralytics_batch(b, semantic=False)
                images += self.check_batch(ub["masks"], ub["batch_idx"], ub["img"].shape[0])
                instances += ub["masks"].shape[0]
        self.assertEqual(images, 80)
        self.assertGreater(instances, 700)

    def test_segmentation_losses_run_on_both_forms(self):
        import torch
        from ultralytics.cfg import get_cfg
        from ultralytics.nn.tasks import SegmentationModel

        from segpipe.ultralytics import overlap_semantic_masks, semantic_masks, to_overlap

        torch.manual_seed(0)
        sq = [(2, 2, 30, 30), (34, 4, 60, 28), (6, 36, 26, 58), (40, 40, 62, 62)]  # disjoint squares on a 64-px canvas
        masks = torch.zeros(len(sq), 16, 16, dtype=torch.uint8)
        for k, (x0, y0, x1, y1) in enumerate(sq):
            masks[k, y0 // 4 : y1 // 4, x0 // 4 : x1 // 4] = 1
        boxes = torch.tensor([[(x0 + x1) / 128, (y0 + y1) / 128, (x1 - x0) / 64, (y1 - y0) / 64] for x0, y0, x1, y1 in sq])
        base = {
            "img": torch.rand(2, 3, 64, 64),
            "batch_idx": torch.tensor([0.0, 0.0, 0.0, 1.0]),
            "cls": torch.tensor([[1.0], [0.0], [2.0], [1.0]]),
            "bboxes": boxes,
            "masks": masks,
        }
        for yaml in ("yolov8n-seg.yaml", "yolo26n-seg.yaml"):
            losses = {}
            for overlap in (False, True):
                model = SegmentationModel(yaml, nc=3, verbose=False)
                model.args = get_cfg(overrides={"overlap_mask": overlap})
                torch.manual_seed(1)
                for p in model.parameters():
                    p.data.normal_(0, 0.02) if p.dim() > 1 else None
                b = {k: v.clone() for k, v in base.items()}
                if overlap:
                    to_overlap(b)
                    b["sem_masks"] = overlap_semantic_masks(b["masks"], b["cls"], b["batch_idx"])
                else:
                    b["sem_masks"] = semantic_masks(b["masks"], b["cls"], b["batch_idx"], 2)
                model.train()
                loss, items = model.loss(b)
                if isinstance(items, dict):
                    items = torch.stack([torch.as_tensor(v, dtype=torch.float32).reshape(()) for v in items.values()])
                self.assertTrue(bool(torch.isfinite(items).all()), f"{yaml} overlap={overlap}: {items}")
                losses[overlap] = items
            # Disjoint instances: the same targets in either form, so the
            # box, class and DFL terms (which read cls, bboxes and batch_idx
            # in the reordered order) agree.
            # (YOLO26's assigner also scores masks, so only v8's is held.)
            keep = [0, 2, 3]
            if yaml.startswith("yolov8"):
                torch.testing.assert_close(losses[True][keep], losses[False][keep], rtol=1e-4, atol=1e-5, msg=lambda m: f"{yaml}: {losses} {m}")


if __name__ == "__main__":
    unittest.main()
