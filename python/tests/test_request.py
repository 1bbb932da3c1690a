"""Tickets, resume states and data URLs: the parts that need neither pyarrow
nor torch."""

import json
import unittest

import _path  # noqa: F401
from segpipe.request import (
    Request,
    RequestError,
    ResumeState,
    Source,
    StateError,
    check_shards,
    parse_app_metadata,
    rank_batches,
)


class TicketTest(unittest.TestCase):
    def test_fresh_request_carries_version_shards_and_start(self):
        self.assertEqual(
            json.loads(Request(shards="coco/train").ticket()),
            {"version": 1, "shards": "coco/train", "start": {"seed": 0, "epoch": 0, "consumed": 0}},
        )

    def test_settings_use_the_server_field_names(self):
        r = Request(
            shards="s",
            start=ResumeState(seed=7, epoch=2, consumed=96),
            epochs=5,
            close_mosaic=1,
            rank=1,
            world_size=4,
            batch_size=8,
            imgsz=320,
            val=True,
            augment={"mosaic": 0, "fill": 114, "keep_crowd": True, "hsv_h": None},
            masks="windowed",
            limit=3,
        )
        self.assertEqual(
            json.loads(r.ticket()),
            {
                "version": 1,
                "shards": "s",
                "start": {"seed": 7, "epoch": 2, "consumed": 96},
                "epochs": 5,
                "close_mosaic": 1,
                "rank": 1,
                "world_size": 4,
                "batch_size": 8,
                "imgsz": 320,
                "val": True,
                "augment": {"mosaic": 0.0, "fill": 114, "keep_crowd": True},
                "masks": "windowed",
                "limit": 3,
            },
        )

    def test_ticket_round_trips(self):
        r = Request(shards="a/b", start=ResumeState(3, 1, 10), batch_size=4, masks="dense", augment={"scale": 0.25})
        back = Request.from_ticket(r.ticket())
        self.assertEqual(back.ticket(), r.ticket())
        self.assertEqual(back.start, ResumeState(3, 1, 10))

    def test_seed_keeps_all_64_bits(self):
        r = Request(start=ResumeState(seed=(1 << 64) - 1))
        self.assertIn(b'"seed":18446744073709551615', r.ticket())
        with self.assertRaises(RequestError):
            ResumeState(seed=1 << 64)

    def test_refused_requests_name_the_field(self):
        cases = [
            (dict(masks="rle"), "masks"),
            (dict(rank=2, world_size=2), "rank 2 of world_size 2"),
            (dict(rank=1), "rank 1 of world_size 1"),
            (dict(batch_size=-1), "batch_size"),
            (dict(batch_size=(1 << 16) + 1), "batch_size"),
            (dict(imgsz=642), "multiple of the mask stride"),
            (dict(imgsz=1 << 15), "imgsz"),
            (dict(limit=-1), "limit"),
            (dict(epochs=2, start=ResumeState(epoch=2)), "epochs 2 leaves nothing"),
            (dict(shards="../etc"), "leaves the shard root"),
            (dict(shards="a/../../b"), "leaves the shard root"),
            (dict(shards="/abs"), "relative"),
            (dict(shards="a\\b"), "forward slashes"),
            (dict(augment={"mosaic": 1.5}), "augment.mosaic"),
            (dict(augment={"scale": 1.0}), "augment.scale"),
            (dict(augment={"degrees": float("nan")}), "augment.degrees"),
            (dict(augment={"copy_pasta": 0.1}), "unknown settings ['copy_pasta']"),
            (dict(augment={"copy_paste_mode": "swap"}), "augment.copy_paste_mode 'swap': want one of flip, mixup"),
            (dict(augment={"mask_rule": 1}), "augment.mask_rule 1: want one of exact, ultralytics"),
            (dict(augment={"fill": 256}), "augment.fill"),
            (dict(augment={"keep_crowd": 1}), "keep_crowd"),
            (dict(batch_size=True), "batch_size"),
            (dict(val=1), "val"),
            (dict(version=2), "version"),
        ]
        for kw, want in cases:
            with self.subTest(kw=kw):
                with self.assertRaises(RequestError) as cm:
                    Request(**kw).validate()
                self.assertIn(want, str(cm.exception))

    def test_from_ticket_refuses_what_the_server_refuses(self):
        for raw, want in [
            (b'{"version":1,"shards":"","turbo":true}', "unknown fields"),
            (b'{"shards":""}', "version 0"),
            (b"[1]", "not an object"),
            (b"{", "not a version 1"),
            (b'{"version":1,"start":{"seed":1,"epochs":2}}', "unknown keys"),
        ]:
            with self.subTest(raw=raw):
                with self.assertRaises(RequestError) as cm:
                    Request.from_ticket(raw)
                self.assertIn(want, str(cm.exception))

    def test_shard_names_are_cleaned_as_the_server_does(self):
        for name, want in [("", "."), (".", "."), ("a//b/", "a/b"), ("./a/./b", "a/b")]:
            self.assertEqual(check_shards(name), want)


class ResumeStateTest(unittest.TestCase):
    def test_app_metadata_gives_state_and_batch_index(self):
        st, i = parse_app_metadata(b'{"seed":5,"epoch":1,"consumed":64,"batch":3}', 3)
        self.assertEqual((st, i), (ResumeState(5, 1, 64), 3))

    def test_bad_app_metadata_is_an_error_naming_the_batch(self):
        for raw, want in [
            (None, "no app metadata"),
            (b"", "no app metadata"),
            (b"not json", "not JSON"),
            (b"[]", "not an object"),
            (b'{"seed":1,"epoch":0,"consumed":0}', "lacks batch"),
            (b'{"seed":1,"epoch":-1,"consumed":0,"batch":0}', "start.epoch"),
            (b'{"seed":"1","epoch":0,"consumed":0,"batch":0}', "start.seed"),
        ]:
            with self.subTest(raw=raw):
                with self.assertRaises(StateError) as cm:
                    parse_app_metadata(raw, 9)
                self.assertIn("batch 9", str(cm.exception))
                self.assertIn(want, str(cm.exception))

    def test_resumed_request_moves_start_and_reduces_limit(self):
        r = Request(shards="s", batch_size=4, limit=10, masks="windowed")
        st = ResumeState(0, 0, 16)
        n = r.resumed(st, 4)
        self.assertEqual((n.start, n.limit, n.batch_size, n.masks), (st, 6, 4, "windowed"))
        self.assertEqual(Request(shards="s").resumed(st, 99).limit, 0)  # no limit stays no limit
        with self.assertRaises(RequestError):
            r.resumed(st, 10)  # never reopen a finished limit as "no limit"

    def test_coerce_takes_a_saved_state(self):
        saved = json.loads(json.dumps(ResumeState(9, 2, 40).to_json()))
        self.assertEqual(ResumeState.coerce(saved), ResumeState(9, 2, 40))
        self.assertEqual(ResumeState.coerce(None), ResumeState())
        with self.assertRaises(RequestError):
            ResumeState.coerce("9,2,40")


class RankBatchesTest(unittest.TestCase):
    def test_matches_the_rank_split_brute_force(self):
        for images in (0, 1, 7, 10, 33):
            for world in (1, 2, 3, 8):
                for batch in (1, 4, 5):
                    for consumed in (0, 3):
                        for rank in range(world):
                            positions = list(range(consumed + rank, images, world))
                            want = -(-len(positions) // batch)
                            self.assertEqual(rank_batches(images, batch, rank, world, consumed), want)

    def test_refuses_a_rank_outside_the_world(self):
        with self.assertRaises(RequestError):
            rank_batches(10, 4, 3, 3)


class SourceTest(unittest.TestCase):
    def test_parse(self):
        s = Source.parse("segpipe://10.0.0.5:8815/coco/train2017?val=coco/val2017&masks=dense&tls=1")
        self.assertEqual(s, Source("10.0.0.5:8815", "coco/train2017", "coco/val2017", "dense", True))
        s = Source.parse("segpipe://127.0.0.1:8815/")
        self.assertEqual((s.train, s.val, s.masks, s.tls, s.mask_rule), (".", ".", "windowed", False, ""))
        s = Source.parse("segpipe://127.0.0.1:8815/t?mask_rule=ultralytics")
        self.assertEqual(s.mask_rule, "ultralytics")

    def test_refused(self):
        for url, want in [
            ("coco.yaml", "want segpipe://"),
            ("segpipe:///train", "HOST:PORT"),
            ("segpipe://host/train", "HOST:PORT"),
            ("segpipe://h:1/t?token=x", "SEGPIPE_TOKEN"),
            ("segpipe://h:1/t?vall=x", "unknown parameters"),
            ("segpipe://h:1/t?masks=rle", "masks"),
            ("segpipe://h:1/../t", "leaves the shard root"),
            ("segpipe://h:1/t?val=a&val=b", "2 times"),
            ("segpipe://h:1/t?mask_rule=polygon2mask", "want one of exact, ultralytics"),
        ]:
            with self.subTest(url=url):
                with self.assertRaises(RequestError) as cm:
                    Source.parse(url)
                self.assertIn(want, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
