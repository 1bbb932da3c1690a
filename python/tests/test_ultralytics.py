"""The Ultralytics adapter against the real Ultralytics code (8.4.2): the batch
dict against its Format transform and collate_fn, YOLO26n-seg's loss on it,
and its SegmentationTrainer driven end to end by SegpipeSegmentationTrainer.

Needs torch and the Ultralytics source (.carry/ultralytics of the checkout,
SEGPIPE_ULTRALYTICS_SRC, or ../shared/baselines/ultralytics-loader/ultralytics)
with its own dependencies; skipped where they are missing. The batches here
are made in the test (the transport is covered by the device check), in the
layout FlightBatches yields.
"""

import math
import os
import sys
import tempfile
import unittest

import _path

try:
    import numpy as np
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None


def _ultralytics_src():
    for p in (
        os.environ.get("SEGPIPE_ULTRALYTICS_SRC", ""),
        os.path.join(_path.REPO, ".carry", "ultralytics"),
        os.path.join(_path.REPO, "..", "shared", "baselines", "ultralytics-loader", "ultralytics"),
    ):
        if p and os.path.isfile(os.path.join(p, "__init__.py")):
            return p
    return None


_UL = None
_UL_ERR = "torch is not installed" if torch is None else None
if torch is not None:
    src = _ultralytics_src()
    if src is None:
        _UL_ERR = "no Ultralytics source (.carry/ultralytics, SEGPIPE_ULTRALYTICS_SRC)"
    else:
        os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(tempfile.gettempdir(), "segpipe-yolo-config"))
        os.environ.setdefault("YOLO_VERBOSE", "false")  # its training log would drown the test output
        try:
            import vendored_ultralytics

            _UL, _PLACEHOLDERS = vendored_ultralytics.import_ultralytics(src)
        except ImportError as e:
            _UL_ERR = f"Ultralytics does not import: {e}"


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


@unittest.skipIf(_UL is None, _UL_ERR or "")
class BatchDictTest(unittest.TestCase):
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


@unittest.skipIf(_UL is None, _UL_ERR or "")
class LossTest(unittest.TestCase):
    def test_yolo26n_seg_loss_is_finite_and_falls_on_an_overfit_batch(self):
        from segpipe.ultralytics import ultralytics_batch

        from overfit import overfit_losses, yolo26n_seg

        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        b = ultralytics_batch(synthetic_batch(n=2, imgsz=64, seed=2))
        b["img"] = b["img"].float() / 255
        losses = overfit_losses(yolo26n_seg(3), b, 8)
        self.assertLess(min(losses[-3:]), losses[0], f"loss did not fall: {losses}")


class _SyntheticLoader:
    """Stands in for the server's stream: serves synthetic batches of the
    requested size and records each epoch's request."""

    requests = []

    @classmethod
    def make(cls):
        from segpipe.ultralytics import SegpipeLoader

        class Loader(SegpipeLoader):
            def stream(self, epoch):
                cls.requests.append({"epoch": epoch, "val": self.val, "mosaic_closed": self.mosaic_closed, "rank": self.rank})
                for k in range(len(self)):
                    bs = min(self.batch_size, self.dataset.images - k * self.batch_size)
                    b = synthetic_batch(n=bs, imgsz=self.imgsz, seed=k)
                    b["state"] = None
                    yield b

        return Loader


@unittest.skipIf(_UL is None, _UL_ERR or "")
class TrainerTest(unittest.TestCase):
    def test_model_train_runs_with_only_the_data_source_changed(self):
        from ultralytics import YOLO

        from segpipe.ultralytics import SegpipeSegmentationTrainer

        _SyntheticLoader.requests.clear()

        class Trainer(SegpipeSegmentationTrainer):
            loader_class = _SyntheticLoader.make()

            def dataset_info(self, shards):
                return {"images": 4, "categories": [{"id": 1 + i, "index": i, "name": f"c{i}"} for i in range(3)]}

        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        with tempfile.TemporaryDirectory() as d:
            model = YOLO("yolo26n-seg.yaml", task="segment")
            model.train(
                trainer=Trainer,
                data="segpipe://127.0.0.1:9/synthetic?val=synthetic-val",
                epochs=2,
                close_mosaic=1,
                imgsz=64,
                batch=2,
                device="cpu",
                workers=0,
                plots=False,
                amp=False,
                project=d,
                name="run",
                exist_ok=True,
                verbose=False,
            )
            trainer = model.trainer
            self.assertEqual(trainer.data["names"], {0: "c0", 1: "c1", 2: "c2"})
            self.assertFalse(trainer.args.overlap_mask)
            self.assertTrue(os.path.isfile(os.path.join(d, "run", "weights", "last.pt")))
            self.assertTrue(all(math.isfinite(float(x)) for x in trainer.tloss))
        train = [r for r in _SyntheticLoader.requests if not r["val"]]
        self.assertEqual([r["epoch"] for r in train], [0, 1])
        self.assertEqual([r["mosaic_closed"] for r in train], [False, True], "close_mosaic must reach the server")
        self.assertTrue(any(r["val"] for r in _SyntheticLoader.requests), "the validator never read the val set")


if __name__ == "__main__":
    unittest.main()
