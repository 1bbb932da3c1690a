"""Ultralytics training through a real `segpipe serve` (harness.Server on
loopback, synthetic shards): the production SegpipeSegmentationTrainer and
SegpipeLoader, unmodified, driven by YOLO(...).train on CPU.

- TrainTest: two epochs from yolo26n-seg.yaml with close_mosaic=1 and plots:
  validation after each epoch and the final evaluation of best.pt, len() of
  both loaders equal to the batches each stream delivered (by the loader's
  records and by the server's log), mosaic off in the request of the last
  epoch only, the loss names Ultralytics gives, the plots written without
  any connection off the machine.
- ResumeTest: three epochs, the process "dies" after the first checkpoint,
  YOLO(last.pt).train(resume=True) goes on at epoch 2 of 3 with the stream
  of that epoch and closes mosaic for the last one.
- RanksTest: the loaders a DDP process would build (RANK/WORLD_SIZE as
  torchrun sets them): the global rank, equal batch counts on every rank,
  validation split across ranks, refusals (AutoBatch, too few images).

Needs torch, ultralytics, pyarrow and a segpipe binary (SEGPIPE_BINARY, or go
to build one); skipped without them, a failure with SEGPIPE_REQUIRE_STACK=1.
About 1.5 minutes on 2 CPU cores.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import tempfile
import unittest
from collections import defaultdict, deque
from unittest import mock

import _path  # noqa: F401
import harness
from overfit import network_attempts, offline_ultralytics

offline_ultralytics()  # before anything imports ultralytics

URL = "segpipe://{addr}/synth?val=synth"
COMMON = dict(imgsz=64, batch=8, workers=0, device="cpu", amp=False, exist_ok=True, seed=0)


def server_streams(log_text: str) -> list[dict]:
    """The streams a server's log records, in the order they started: shard
    set, start epoch, batch size, and the batches it sent (None while one
    has not ended)."""
    out, open_ = [], defaultdict(deque)
    for line in log_text.splitlines():
        m = re.search(r'msg="(stream started|stream finished|stream ended by the client)" client="([^"]*)" shards=(\S+) start="\{Seed:(\d+) Epoch:(\d+) Consumed:(\d+)\}"', line)
        if not m:
            continue
        kind, key = m.group(1), m.group(2, 3, 4, 5, 6)
        if kind == "stream started":
            rec = {"shards": m.group(3), "epoch": int(m.group(5)), "batch_size": int(re.search(r"batch_size=(\d+)", line).group(1)), "batches": None, "client": m.group(2)}
            out.append(rec)
            open_[key].append(rec)
        else:
            open_[key].popleft()["batches"] = int(re.search(r"batches=(\d+)", line).group(1))
    return out


def _threads():
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


class _Interrupted(Exception):
    """Stands for the process dying right after a checkpoint was written."""


class TrainTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.require("torch", "ultralytics", "pyarrow")
        offline_ultralytics()
        _threads()
        from ultralytics import YOLO

        from segpipe.ultralytics import SegpipeSegmentationTrainer

        cls.server = harness.Server().start()
        cls.dir = tempfile.mkdtemp(prefix="segpipe-ul-train-")
        cls.net_before = len(network_attempts())
        model = YOLO("yolo26n-seg.yaml", task="segment")
        try:
            model.train(
                trainer=SegpipeSegmentationTrainer,
                data=URL.format(addr=cls.server.addr),
                epochs=2,
                close_mosaic=1,
                plots=True,
                project=cls.dir,
                name="run",
                **COMMON,
            )
        except BaseException:
            cls.server.stop()
            shutil.rmtree(cls.dir, True)
            raise
        cls.model, cls.trainer = model, model.trainer
        cls.run_dir = os.path.join(cls.dir, "run")
        cls.server.stop()  # flushes its log: every stream has ended
        with open(cls.server.log) as f:
            cls.log = f.read()
        cls.net = network_attempts()[cls.net_before :]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "dir", ""), True)

    def test_validation_each_epoch_and_final_evaluation_of_best(self):
        with open(os.path.join(self.run_dir, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([int(float(r["epoch"])) for r in rows], [1, 2])
        for r in rows:
            self.assertIn("metrics/mAP50(M)", r)
            self.assertIn("metrics/mAP50(B)", r)
        self.assertTrue(os.path.isfile(os.path.join(self.run_dir, "weights", "best.pt")))
        val = self.trainer.test_loader
        # One val stream after each epoch, then one for best.pt's evaluation.
        self.assertEqual(len(val.streams), 3)
        self.assertTrue(all(r.request.val for r in val.streams))
        self.assertTrue(all(r.images == 64 for r in val.streams), "each validation read the whole val set")
        # The last validator call was stand-alone: best.pt loaded from disk.
        self.assertFalse(self.trainer.validator.training)
        metrics = self.model.metrics
        self.assertIsNotNone(metrics)
        self.assertIn("metrics/mAP50(M)", metrics.results_dict)
        self.assertEqual(self.trainer.data["nc"], len(self.trainer.data["names"]))
        self.assertTrue(self.trainer.args.overlap_mask, "Ultralytics' default, now honoured")

    def test_len_equals_batches_streamed(self):
        tl, vl = self.trainer.train_loader, self.trainer.test_loader
        self.assertEqual(len(tl), 8)  # 64 images / 8
        self.assertEqual([r.batches for r in tl.streams], [len(tl)] * 2)
        self.assertEqual(tl.batches_streamed, 2 * len(tl))
        self.assertEqual([r.batches for r in vl.streams], [len(vl)] * 3)
        self.assertEqual(len(tl.sampler), 64)
        # The server's own count of what it sent, stream by stream.
        streams = server_streams(self.log)
        train = [s for s in streams if s["batch_size"] == 8]
        val = [s for s in streams if s["batch_size"] == 16]
        self.assertEqual([(s["epoch"], s["batches"]) for s in train], [(0, len(tl)), (1, len(tl))])
        self.assertEqual([s["batches"] for s in val], [len(vl)] * 3)
        self.assertEqual(len(streams), 5)

    def test_mosaic_off_in_the_last_epoch_only(self):
        reqs = [r.request for r in self.trainer.train_loader.streams]
        self.assertEqual([r.start.epoch for r in reqs], [0, 1])
        self.assertEqual([r.augment["mosaic"] for r in reqs], [1.0, 0.0])
        # What the server received: the ticket bytes of each request.
        import json

        self.assertEqual([json.loads(r.ticket())["augment"]["mosaic"] for r in reqs], [1.0, 0.0])
        self.assertEqual(json.loads(reqs[1].ticket())["start"], {"seed": 0, "epoch": 1, "consumed": 0})

    def test_loss_names_are_ultralytics(self):
        names = tuple(self.trainer.loss_names)
        self.assertEqual(len(names), 5)
        tloss = self.trainer.tloss
        if isinstance(tloss, dict):  # later 8.4: named by the criterion's loss dict
            self.assertEqual(names, tuple(tloss))
        else:  # 8.4.2: named by SegmentationTrainer.get_validator
            self.assertEqual(len(names), len(tloss))
            self.assertEqual(names, ("box_loss", "seg_loss", "cls_loss", "dfl_loss", "sem_loss"))
        with open(os.path.join(self.run_dir, "results.csv")) as f:
            header = next(csv.reader(f))
        for n in names:
            self.assertIn(f"train/{n}", header)
            self.assertIn(f"val/{n}", header)

    def test_plots_without_downloads(self):
        files = set(os.listdir(self.run_dir))
        for f in ("train_batch0.jpg", "val_batch0_labels.jpg", "val_batch0_pred.jpg", "results.png"):
            self.assertIn(f, files)
        self.assertEqual(self.net, [], "Ultralytics tried to reach the network (imported before offline_ultralytics()?)")


class self_raises:
    """assertRaises outside a TestCase (setUpClass)."""

    def __init__(self, exc):
        self.exc = exc

    def __enter__(self):
        return self

    def __exit__(self, typ, val, tb):
        if typ is None:
            raise AssertionError(f"{self.exc.__name__} was not raised")
        return issubclass(typ, self.exc)


class ResumeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.require("torch", "ultralytics", "pyarrow")
        offline_ultralytics()
        _threads()
        from ultralytics import YOLO

        from segpipe.ultralytics import SegpipeSegmentationTrainer

        cls.server = harness.Server().start()
        cls.dir = tempfile.mkdtemp(prefix="segpipe-ul-resume-")

        def die(trainer):
            raise _Interrupted(f"after epoch {trainer.epoch}")

        try:
            first = YOLO("yolo26n-seg.yaml", task="segment")
            first.add_callback("on_model_save", die)
            with self_raises(_Interrupted):
                first.train(
                    trainer=SegpipeSegmentationTrainer,
                    data=URL.format(addr=cls.server.addr),
                    epochs=3,
                    close_mosaic=1,
                    plots=False,
                    project=cls.dir,
                    name="run",
                    **COMMON,
                )
            cls.first = first.trainer
            cls.last = os.path.join(cls.dir, "run", "weights", "last.pt")
            import torch

            cls.saved_epoch = torch.load(cls.last, map_location="cpu", weights_only=False)["epoch"]
            second = YOLO(cls.last)
            second.train(resume=True, trainer=SegpipeSegmentationTrainer)
            cls.second = second.trainer
        finally:
            cls.server.stop()
        with open(cls.server.log) as f:
            cls.log = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "dir", ""), True)

    def test_resume_picks_up_the_next_epoch(self):
        self.assertEqual(self.saved_epoch, 0)
        self.assertEqual([r.request.start.epoch for r in self.first.train_loader.streams], [0])
        self.assertEqual(self.second.start_epoch, 1)
        reqs = [r.request for r in self.second.train_loader.streams]
        self.assertEqual([r.start.epoch for r in reqs], [1, 2])
        self.assertEqual([r.augment["mosaic"] for r in reqs], [1.0, 0.0], "close_mosaic=1 of 3 epochs: the last one only")
        self.assertEqual(str(self.second.args.data), URL.format(addr=self.server.addr), "the data URL comes from the checkpoint")
        train = [(s["epoch"], s["batches"]) for s in server_streams(self.log) if s["batch_size"] == 8]
        self.assertEqual(train, [(0, 8), (1, 8), (2, 8)])
        with open(os.path.join(self.dir, "run", "results.csv")) as f:
            self.assertEqual([int(float(r["epoch"])) for r in csv.DictReader(f)], [1, 2, 3])


class RanksTest(unittest.TestCase):
    """The loaders of a DDP run, one process standing in for each rank by
    its RANK/WORLD_SIZE (torch.distributed is not initialised here, so the
    adapter reads them as it does before the process group exists)."""

    @classmethod
    def setUpClass(cls):
        harness.require("torch", "ultralytics", "pyarrow")
        offline_ultralytics()
        from segpipe.ultralytics import SegpipeSegmentationTrainer

        cls.server = harness.shared_server()
        cls.dir = tempfile.mkdtemp(prefix="segpipe-ul-ranks-")
        cls.trainer = SegpipeSegmentationTrainer(
            overrides=dict(
                model="yolo26n-seg.yaml",
                data=f"segpipe://{cls.server.addr}/odd?val=odd",
                project=cls.dir,
                name="run",
                imgsz=64,
                batch=16,
                device="cpu",
                exist_ok=True,
            )
        )

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "dir", ""), True)

    def loader(self, rank: int, world: int, local_rank: int, mode: str, batch: int = 16):
        env = {"RANK": str(rank), "WORLD_SIZE": str(world)}
        with mock.patch.dict(os.environ, env):
            return self.trainer.get_dataloader("odd", batch_size=batch, rank=local_rank, mode=mode)

    @staticmethod
    def ids(loader) -> list[str]:
        return [f for b in loader for f in b["im_file"]]

    def test_train_streams_use_the_global_rank_and_equal_batch_counts(self):
        from segpipe.request import rank_batches

        world = 8
        self.assertEqual([rank_batches(129, 16, r, world) for r in range(world)], [2, 1, 1, 1, 1, 1, 1, 1])
        seen = []
        for g in range(world):
            ld = self.loader(g, world, local_rank=g % 2, mode="train")  # two processes a node
            self.assertEqual((ld.rank, ld.world_size), (g, world))
            self.assertEqual(len(ld), 1, f"rank {g}")
            got = self.ids(ld)
            self.assertEqual(ld.streams[0].request.rank, g)
            self.assertEqual(ld.streams[0].request.limit, 1)
            self.assertEqual(ld.batches_streamed, len(ld), f"rank {g}")
            self.assertEqual(len(got), len(ld.sampler), f"rank {g}")
            seen += got
        self.assertEqual(len(seen), 128)
        self.assertEqual(len(set(seen)), 128, "the ranks' streams overlap")

    def test_rect_training_streams_rectangular_batches(self):
        """rect=True in the trainer's arguments: its training loader asks
        for rect batches (Ultralytics' rect training), each batch's images
        on its own shape on the stride grid, no side past imgsz."""
        args = self.trainer.args
        saved = args.rect, args.imgsz
        args.rect, args.imgsz = True, 160
        try:
            ld = self.loader(0, 1, local_rank=-1, mode="train")
            shapes = [tuple(b["img"].shape[2:]) for b in ld]
        finally:
            args.rect, args.imgsz = saved
        self.assertTrue(all(r.request.rect and not r.request.val for r in ld.streams))
        self.assertTrue(all(h % 32 == 0 and w % 32 == 0 and max(h, w) == 160 for h, w in shapes), shapes)
        self.assertTrue(any(h != w for h, w in shapes), f"no rectangular batch: {shapes}")

    def test_validation_is_split_across_ranks(self):
        whole = self.loader(0, 1, local_rank=-1, mode="val", batch=32)
        all_ids = self.ids(whole)
        self.assertEqual(len(all_ids), 129)
        parts = []
        for g in range(2):
            ld = self.loader(g, 2, local_rank=g, mode="val", batch=32)
            self.assertEqual((ld.rank, ld.world_size, ld.idle), (g, 2, False))
            self.assertEqual(len(ld.dataset), 129, "Ultralytics counts the whole set on rank 0 after gathering")
            got = self.ids(ld)
            self.assertEqual(ld.batches_streamed, len(ld))
            parts.append(got)
        self.assertEqual([len(p) for p in parts], [65, 64])
        self.assertEqual(sorted(parts[0] + parts[1]), sorted(all_ids))

    def test_unsplit_loader_reads_the_whole_set(self):
        # Ultralytics passes rank -1 for a loader it does not split (as for
        # QAT calibration): even inside a DDP process that is rank 0 of 1.
        ld = self.loader(5, 8, local_rank=-1, mode="train")
        self.assertEqual((ld.rank, ld.world_size, ld.limit, len(ld)), (0, 1, 0, 9))

    def test_too_few_images_for_the_ranks(self):
        from segpipe.request import RequestError

        with self.assertRaisesRegex(RequestError, "129 images for 200 ranks"):
            self.loader(0, 200, local_rank=0, mode="train", batch=1)

    def test_a_stream_shorter_than_len_fails(self):
        from segpipe.request import Source
        from segpipe.stream import StreamError
        from segpipe.ultralytics import SegpipeLoader

        # The loader believes the set has 150 images (10 batches); the server
        # has 129 (9 batches).
        ld = SegpipeLoader(
            Source.parse(f"segpipe://{self.server.addr}/odd"), "odd", images=150, batch_size=16, imgsz=64,
            rank=0, world_size=1, seed=0, val=True, augment={}, epoch_fn=lambda: 0,
        )  # fmt: skip
        with self.assertRaisesRegex(StreamError, "ended after 9 batches, want 10"):
            list(ld)

    def test_autobatch_is_refused(self):
        from ultralytics import YOLO

        from segpipe.request import RequestError
        from segpipe.ultralytics import SegpipeSegmentationTrainer

        for b in (-1, 0.7):
            with self.assertRaisesRegex(RequestError, "AutoBatch"):
                YOLO("yolo26n-seg.yaml", task="segment").train(
                    trainer=SegpipeSegmentationTrainer,
                    data=f"segpipe://{self.server.addr}/synth",
                    epochs=1,
                    project=self.dir,
                    name="autobatch",
                    **{**COMMON, "batch": b},
                )

    def test_settings_without_a_counterpart_are_refused(self):
        from ultralytics import YOLO

        from segpipe.request import RequestError
        from segpipe.ultralytics import SegpipeSegmentationTrainer, unsupported_settings

        # cls_pw exists in newer Ultralytics releases only; an older one
        # refuses it itself.
        cases = [(k, v) for k, v in (("save_txt", True), ("cls_pw", 0.5)) if k in unsupported_settings()]
        self.assertIn("save_txt", dict(cases))
        for k, v in cases:
            with self.assertRaisesRegex(RequestError, f"{k}={v!r} has no segpipe counterpart"):
                YOLO("yolo26n-seg.yaml", task="segment").train(
                    trainer=SegpipeSegmentationTrainer,
                    data=f"segpipe://{self.server.addr}/synth",
                    epochs=1,
                    project=self.dir,
                    name="refused",
                    **{**COMMON, k: v},
                )


if __name__ == "__main__":
    unittest.main()
