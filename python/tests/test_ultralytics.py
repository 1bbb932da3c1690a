"""The Ultralytics adapter against the installed Ultralytics (the supported
range is segpipe.ultralytics.ULTRALYTICS_REQUIREMENT): the batch dict against
its Format transform and collate_fn, the semantic-mask rule against its
Format, YOLO26n-seg's loss on an adapter batch, the version range, and the
loader stand-in's counts. Training through a real `segpipe serve` is in
test_ultralytics_serve.py.

Needs torch and ultralytics (skipped without them; SEGPIPE_REQUIRE_STACK=1
makes that a failure). The batches here are made in the test, in the layout
FlightBatches yields.
"""

import os
import unittest

import _path  # noqa: F401
import harness
from overfit import offline_ultralytics

offline_ultralytics()  # before anything imports ultralytics

try:
    import numpy as np
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None


def require_ultralytics():
    """Skip (or with SEGPIPE_REQUIRE_STACK=1 fail) unless torch and
    Ultralytics import; no server is needed here."""
    import importlib

    for m in ("torch", "ultralytics"):
        try:
            importlib.import_module(m)
        except ImportError as e:
            if harness.REQUIRED:
                raise AssertionError(f"{m} does not import: {e} (SEGPIPE_REQUIRE_STACK=1)")
            raise unittest.SkipTest(f"{m} does not import: {e}")


def synthetic_batch(n=2, imgsz=64, nc=3, seed=0, crowd=False):
    """A batch in FlightBatches' layout: each image gray with one to three
    filled rectangles, each rectangle an instance whose mask is its cells at
    stride 4."""
    g = torch.Generator().manual_seed(seed)
    hp = imgsz // 4
    images = torch.full((n, 3, imgsz, imgsz), 114, dtype=torch.uint8)
    boxes, classes, masks, bpi = [], [], [], []
    for i in range(n):
        k = int(torch.randint(1, 4, (1,), generator=g))
        bpi.append(k)
        for _ in range(k):
            x0, y0 = (int(v) for v in torch.randint(0, hp - 4, (2,), generator=g))
            w, h = (int(v) for v in torch.randint(3, hp // 2, (2,), generator=g))
            x1, y1 = min(hp, x0 + w), min(hp, y0 + h)
            c = int(torch.randint(0, nc, (1,), generator=g))
            m = torch.zeros((hp, hp), dtype=torch.uint8)
            m[y0:y1, x0:x1] = 1
            masks.append(m)
            boxes.append([4.0 * x0, 4.0 * y0, 4.0 * x1, 4.0 * y1])
            classes.append(c)
            images[i, :, 4 * y0 : 4 * y1, 4 * x0 : 4 * x1] = torch.tensor([40 + 70 * c, 200 - 60 * c, 90])[:, None, None]
    s = sum(bpi)
    iscrowd = torch.zeros(s, dtype=torch.uint8)
    if crowd:
        iscrowd[0] = 1
    bpi_t = torch.tensor(bpi, dtype=torch.int32)
    return {
        "images": images,
        "image_id": torch.arange(100, 100 + n, dtype=torch.int64),
        "orig_height": torch.full((n,), 48, dtype=torch.int32),
        "orig_width": torch.full((n,), 64, dtype=torch.int32),
        "transform": torch.tensor([[1.0, 0.0, 0.0, 0.0, 1.0, 8.0]] * n, dtype=torch.float64),
        "boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
        "classes": torch.tensor(classes, dtype=torch.int32),
        "iscrowd": iscrowd,
        "boxes_per_image": bpi_t,
        "offsets": torch.cat((torch.zeros(1, dtype=torch.int32), torch.cumsum(bpi_t, 0).to(torch.int32))),
        "masks": torch.stack(masks),
    }


class BatchDictTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_ultralytics()

    def test_matches_ultralytics_format_and_collate(self):
        from ultralytics.data.augment import Format
        from ultralytics.data.dataset import YOLODataset
        from ultralytics.utils.instance import Instances

        from segpipe.ultralytics import semantic_masks, ultralytics_batch

        b = synthetic_batch(n=3, imgsz=64, seed=4)
        ours = ultralytics_batch(b, im_prefix="p/")
        fmt = Format(bbox_format="xywh", normalize=True, return_mask=True, mask_ratio=4, mask_overlap=False, batch_idx=True)
        samples = []
        off = b["offsets"].tolist()
        for i in range(3):
            xyxy = b["boxes"][off[i] : off[i + 1]].numpy().astype(np.float32)
            segs = [np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]], dtype=np.float32) for x1, y1, x2, y2 in xyxy]
            samples.append(
                fmt(
                    {
                        "img": np.ascontiguousarray(b["images"][i].permute(1, 2, 0).numpy()[:, :, ::-1]),  # BGR, as cv2 reads
                        "cls": b["classes"][off[i] : off[i + 1]].numpy().astype(np.float32).reshape(-1, 1),
                        "instances": Instances(xyxy.copy(), segments=segs, bbox_format="xyxy", normalized=False),
                    }
                )
            )
        theirs = YOLODataset.collate_fn(samples)
        self.assertTrue(torch.equal(ours["img"], theirs["img"]), "images must be RGB CHW uint8 as Format makes them")
        for k in ("batch_idx", "cls", "bboxes"):
            self.assertEqual(ours[k].dtype, theirs[k].dtype, k)
            self.assertEqual(ours[k].shape, theirs[k].shape, k)
            torch.testing.assert_close(ours[k], theirs[k], msg=k)
        self.assertEqual(ours["masks"].shape, theirs["masks"].shape)
        self.assertEqual(ours["masks"].dtype, theirs["masks"].dtype)
        # Format's masks come from cv2.fillPoly then a resize, ours from the
        # rasteriser: the semantic rule must agree given the same masks.
        want_sem = theirs["sem_masks"]
        got_sem = semantic_masks(theirs["masks"], theirs["cls"], theirs["batch_idx"], 3)
        torch.testing.assert_close(got_sem, want_sem)
        self.assertEqual(ultralytics_batch(b)["sem_masks"].shape, want_sem.shape)
        self.assertEqual(ours["ori_shape"], ((48, 64),) * 3)
        self.assertEqual(ours["ratio_pad"], (((1.0, 1.0), (0.0, 8.0)),) * 3)
        self.assertEqual(ours["im_file"], ("p/100", "p/101", "p/102"))

    def test_crowd_instances_are_dropped(self):
        from segpipe.ultralytics import ultralytics_batch

        b = synthetic_batch(n=2, seed=1, crowd=True)
        out = ultralytics_batch(b)
        s = int(b["boxes_per_image"].sum())
        self.assertEqual(out["cls"].shape[0], s - 1)
        self.assertEqual(out["masks"].shape[0], s - 1)
        self.assertTrue(torch.equal(out["masks"], b["masks"][1:]))
        self.assertEqual(out["batch_idx"][0].item(), 0.0 if int(b["boxes_per_image"][0]) > 1 else 1.0)


class LossTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_ultralytics()

    def test_yolo26n_seg_loss_is_finite_and_falls_on_an_overfit_batch(self):
        from segpipe.ultralytics import ultralytics_batch

        from overfit import overfit_losses, yolo26n_seg

        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        b = ultralytics_batch(synthetic_batch(n=2, imgsz=64, seed=2))
        b["img"] = b["img"].float() / 255
        losses = overfit_losses(yolo26n_seg(3), b, 8)
        self.assertLess(min(losses[-3:]), losses[0], f"loss did not fall: {losses}")


class SemanticMaskTest(unittest.TestCase):
    """YOLO26's semantic targets: the rule changed within 8.4 (the largest
    class index in 8.4.2, the smallest covering instance later); the adapter
    follows the installed release."""

    @classmethod
    def setUpClass(cls):
        require_ultralytics()

    def _format(self, boxes, classes, size=32):
        from ultralytics.data.augment import Format
        from ultralytics.utils.instance import Instances

        xyxy = np.array(boxes, dtype=np.float32)
        segs = np.array([[[x0, y0], [x1, y0], [x1, y1], [x0, y1]] for x0, y0, x1, y1 in boxes], dtype=np.float32)
        fmt = Format(bbox_format="xywh", normalize=True, return_mask=True, mask_ratio=4, mask_overlap=False, batch_idx=True)
        return fmt(
            {
                "img": np.zeros((size, size, 3), dtype=np.uint8),
                "cls": np.array(classes, dtype=np.float32).reshape(-1, 1),
                "instances": Instances(xyxy, segments=segs, bbox_format="xyxy", normalized=False),
            }
        )

    def test_rules_by_hand(self):
        from segpipe.ultralytics import SEM_MAX_CLASS, SEM_SMALLEST_INSTANCE, semantic_masks

        # Image 0: a 4x4 instance of class 2 with a 2x2 one of class 1 inside
        # and a 2x2 one of class 3 overlapping its corner; image 1: one
        # instance of class 0, one of class 4 of the same size on top of it
        # (equal areas: the first one wins under the smallest-instance rule).
        masks = torch.zeros((5, 4, 4), dtype=torch.uint8)
        masks[0] = 1
        masks[1, 1:3, 1:3] = 1
        masks[2, 2:4, 2:4] = 1
        masks[3, 0:2, 0:2] = 1
        masks[4, 0:2, 0:2] = 1
        cls = torch.tensor([[2.0], [1.0], [3.0], [0.0], [4.0]])
        bidx = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0])
        mx = semantic_masks(masks, cls, bidx, 2, rule=SEM_MAX_CLASS)
        sm = semantic_masks(masks, cls, bidx, 2, rule=SEM_SMALLEST_INSTANCE)
        self.assertEqual(mx[0].tolist(), [[2, 2, 2, 2], [2, 2, 2, 2], [2, 2, 3, 3], [2, 2, 3, 3]])
        # (1,1), (1,2), (2,1) by the inner square; (2,2) by the first of the
        # two 2x2 squares (inner, class 1); (2,3) (3,2) (3,3) by class 3.
        self.assertEqual(sm[0].tolist(), [[2, 2, 2, 2], [2, 1, 1, 2], [2, 1, 1, 3], [2, 2, 3, 3]])
        self.assertEqual(mx[1].tolist(), [[4, 4, 0, 0], [4, 4, 0, 0], [0] * 4, [0] * 4])
        self.assertEqual(sm[1].tolist(), [[0] * 4] * 4, "equal areas: the first instance (class 0) wins")
        empty = semantic_masks(masks[:0], cls[:0], bidx[:0], 3)
        self.assertEqual(tuple(empty.shape), (3, 4, 4))
        self.assertFalse(bool(empty.any()))
        with self.assertRaises(ValueError):
            semantic_masks(masks, cls, bidx, 2, rule="median")

    def test_installed_format_agrees_on_overlaps(self):
        from segpipe.ultralytics import semantic_masks, semantic_rule

        cases = [
            ([(0, 0, 32, 32), (8, 8, 24, 24)], [2, 1]),  # small inside large, lower class inside
            ([(0, 0, 32, 32), (8, 8, 24, 24)], [1, 2]),
            ([(0, 0, 20, 20), (12, 12, 32, 32), (4, 16, 28, 28)], [3, 1, 2]),
            ([(0, 0, 16, 16), (8, 8, 24, 24)], [0, 5]),  # equal areas
        ]
        for boxes, classes in cases:
            theirs = self._format(boxes, classes)
            k = theirs["masks"].shape[0]
            ours = semantic_masks(theirs["masks"], theirs["cls"], torch.zeros(k), 1)
            torch.testing.assert_close(ours[0], theirs["sem_masks"], msg=f"{boxes} {classes} ({semantic_rule()})")


class VersionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_ultralytics()

    def test_range(self):
        from segpipe.ultralytics import ULTRALYTICS_REQUIREMENT, check_version, version_supported, version_tuple

        self.assertEqual(ULTRALYTICS_REQUIREMENT, "ultralytics>=8.4.2,<8.5")
        for v in ("8.4.2", "8.4.3", "8.4.99", "8.4.190", "8.4.2.post1"):
            self.assertTrue(version_supported(v), v)
            self.assertIsNone(check_version(v), v)
        for v in ("8.4.1", "8.4.0", "8.4", "8.3.250", "8.5.0", "8.5.0rc1", "9.0.0", "7.9.9"):
            self.assertFalse(version_supported(v), v)
            self.assertIn(v, check_version(v) or "", v)
        self.assertEqual(version_tuple("v8.4.190"), (8, 4, 190))
        self.assertIn("Ultralytics dev", check_version("dev") or "", "a version without a release number is not supported")

    def test_installed_release_is_supported(self):
        import ultralytics

        from segpipe.ultralytics import check_version

        self.assertIsNone(check_version(), f"these tests ran against Ultralytics {ultralytics.__version__}")


class LoaderCountsTest(unittest.TestCase):
    """What the trainer reads off the loader before any stream: len(), the
    sampler's sample count, drop_last, the dataset's size."""

    @classmethod
    def setUpClass(cls):
        require_ultralytics()

    def loader(self, **kw):
        from segpipe.request import Source
        from segpipe.ultralytics import SegpipeLoader

        args = dict(images=129, batch_size=16, imgsz=64, rank=0, world_size=1, seed=0, val=False, augment={}, epoch_fn=lambda: 0)
        args.update(kw)
        return SegpipeLoader(Source.parse("segpipe://127.0.0.1:9/odd"), "odd", **args)

    def test_counts(self):
        from segpipe.request import rank_batches

        one = self.loader()
        self.assertEqual((len(one), len(one.sampler), len(one.dataset)), (9, 129, 129))
        self.assertFalse(one.drop_last)
        self.assertEqual(len(one.sampler) % one.batch_size, 1, "the last batch holds one image")
        self.assertEqual([rank_batches(129, 16, r, 8) for r in range(8)], [2, 1, 1, 1, 1, 1, 1, 1])
        for r in range(8):
            ld = self.loader(rank=r, world_size=8, limit=1)
            self.assertEqual(len(ld), 1, r)
            self.assertEqual(len(ld.sampler), 16, r)
            self.assertEqual(len(ld.dataset), 129, "the dataset is the whole set, as Ultralytics' is under DDP")
        short = self.loader(images=20, batch_size=16, rank=1, world_size=2, limit=1)
        self.assertEqual((len(short), len(short.sampler)), (1, 10))

    def test_idle(self):
        ld = self.loader(val=True, idle=True)
        self.assertEqual((len(ld), len(ld.sampler), len(ld.dataset)), (0, 0, 129))
        self.assertEqual(list(ld), [])
        self.assertTrue(ld, "an empty loader is still a loader (the validator must not build its own)")
        self.assertEqual(ld.streams, [])

    def test_mosaic_switch(self):
        ld = self.loader(augment={"mosaic": 1.0})
        self.assertTrue(ld.dataset.mosaic)
        ld.dataset.close_mosaic(hyp=None)
        self.assertTrue(ld.mosaic_closed)
        self.assertFalse(ld.dataset.mosaic)
        other = self.loader(augment={"mosaic": 1.0})
        other.dataset.mosaic = False  # what the trainer does first
        self.assertTrue(other.mosaic_closed)

    def test_close_mosaic_turns_off_what_ultralytics_does(self):
        from ultralytics.cfg import DEFAULT_CFG, get_cfg
        from ultralytics.data.dataset import YOLODataset

        from segpipe.ultralytics import CLOSED_WITH_MOSAIC

        hyp = get_cfg(DEFAULT_CFG, dict(mosaic=1.0, copy_paste=0.5, mixup=0.3, cutmix=0.2, fliplr=0.4))
        ds = YOLODataset.__new__(YOLODataset)
        ds.build_transforms = lambda hyp: None
        ds.close_mosaic(hyp)
        theirs = {k for k in ("mosaic", "copy_paste", "mixup", "cutmix", "fliplr") if getattr(hyp, k) == 0.0}
        self.assertEqual(set(CLOSED_WITH_MOSAIC), theirs)
        ld = self.loader(augment={"mosaic": 1.0, "copy_paste": 0.5, "mixup": 0.3, "cutmix": 0.2, "fliplr": 0.4})
        ld.dataset.close_mosaic(hyp=None)
        fb = ld.stream(5)
        self.assertEqual({k: fb.request.augment[k] for k in ("mosaic", "copy_paste", "mixup", "cutmix", "fliplr")},
                         {"mosaic": 0.0, "copy_paste": 0.0, "mixup": 0.0, "cutmix": 0.0, "fliplr": 0.4})  # fmt: skip
        fb.close()

    def test_validator_gathers(self):
        from ultralytics.engine.validator import BaseValidator
        from ultralytics.models.yolo.segment import SegmentationValidator

        from segpipe.ultralytics import validator_gathers

        self.assertTrue(validator_gathers(SegmentationValidator))
        self.assertFalse(validator_gathers(BaseValidator))


class AugmentSettingsTest(unittest.TestCase):
    """The augmentation settings the trainer passes on come from segpipe's
    table (segpipe._augment, generated from augment.Config): a setting added
    there that Ultralytics also has is passed on, and no longer refused,
    with no change to the adapter."""

    @classmethod
    def setUpClass(cls):
        require_ultralytics()

    def args(self, **overrides):
        from ultralytics.cfg import DEFAULT_CFG, get_cfg

        return get_cfg(DEFAULT_CFG, dict(overrides, batch=16))

    def test_table_settings_ultralytics_has_are_passed_on(self):
        from ultralytics.cfg import DEFAULT_CFG_DICT

        from segpipe._augment import AUGMENT_TYPES
        from segpipe.ultralytics import augment_settings

        got = augment_settings(self.args(degrees=5, fliplr=0.0, hsv_h=0.1))
        self.assertEqual(set(got), set(AUGMENT_TYPES) & set(DEFAULT_CFG_DICT))
        today = {"mosaic", "degrees", "translate", "scale", "shear", "perspective", "hsv_h", "hsv_s", "hsv_v", "fliplr"}
        self.assertLessEqual(today, set(got))
        self.assertEqual((got["degrees"], got["fliplr"], got["hsv_h"]), (5.0, 0.0, 0.1))
        self.assertIs(type(got["degrees"]), float, "an int argument goes to the server as the table's float")
        for k in ("fill", "min_side", "min_area", "max_aspect", "keep_crowd"):
            self.assertNotIn(k, got, "a setting Ultralytics lacks keeps the server's default")

    def test_setting_added_to_the_table_is_passed_on_not_refused(self):
        from unittest import mock

        from segpipe.request import RequestError
        from segpipe.ultralytics import SegpipeSegmentationTrainer, augment_settings, unsupported_settings

        def check(args):
            SegpipeSegmentationTrainer.check_settings(mock.Mock(args=args))

        # Settings refused today (whichever are left once the table grows),
        # one of each kind, and an Ultralytics integer setting the table lacks.
        refused = unsupported_settings()
        f = next((k for k, off in refused.items() if type(off) is float and off == 0.0), None)
        b = next((k for k, off in refused.items() if off is False and k != "cache"), None)
        if f is None or b is None:
            self.skipTest("no float and bool setting left without a segpipe counterpart")
        with self.assertRaisesRegex(RequestError, f):
            check(self.args(**{f: 0.5}))
        added = {f: "float", b: "bool", "nbs": "uint8"}
        with mock.patch.dict("segpipe._augment.AUGMENT_TYPES", added):
            check(self.args(**{f: 0.5, b: True}))
            self.assertNotIn(f, unsupported_settings())
            got = augment_settings(self.args(**{f: 0.5, b: True, "nbs": 64}))
            self.assertEqual((got[f], got[b], got["nbs"]), (0.5, True, 64))
            self.assertEqual((type(got[f]), type(got[b]), type(got["nbs"])), (float, bool, int))
        self.assertNotIn(f, augment_settings(self.args()))

    def test_multi_scale_resizes_as_ultralytics_does(self):
        """multi_scale is Ultralytics' trainer's own step (preprocess_batch
        draws a size on the stride grid and resizes the batch's images on the
        device; the loss resizes the targets): the adapter's trainer takes
        that step unchanged, so the setting means what the installed release
        says (8.4.2: the probability of a size in [imgsz/2, imgsz]; later
        8.4: sizes within imgsz·(1 ± multi_scale))."""
        import random

        from ultralytics.models.yolo.segment import SegmentationTrainer

        from segpipe.ultralytics import SegpipeSegmentationTrainer, ultralytics_batch, unsupported_settings

        self.assertNotIn("multi_scale", unsupported_settings())
        imgsz, m, stride = 64, 0.5, 32
        sizes = set()
        for seed in range(40):
            got = []
            for cls in (SegpipeSegmentationTrainer, SegmentationTrainer):
                t = cls.__new__(cls)
                t.args = self.args(imgsz=imgsz, multi_scale=m, overlap_mask=False)
                t.device, t.stride = torch.device("cpu"), stride
                random.seed(seed)
                got.append(t.preprocess_batch(ultralytics_batch(synthetic_batch(n=2, imgsz=imgsz, seed=seed))))
            ours, theirs = got
            self.assertEqual(ours["img"].shape, theirs["img"].shape)
            torch.testing.assert_close(ours["img"], theirs["img"], rtol=0, atol=0)
            torch.testing.assert_close(ours["masks"], theirs["masks"], rtol=0, atol=0)
            h, w = ours["img"].shape[2:]
            self.assertEqual((h % stride, w % stride), (0, 0))
            self.assertTrue(stride <= h <= imgsz * (1 + m) + stride, h)
            sizes.add(h)
        self.assertGreater(len(sizes), 1, "every seed drew the same size")


if __name__ == "__main__":
    unittest.main()
