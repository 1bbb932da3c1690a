"""FlightBatches under torch.distributed: two CPU processes on the gloo
backend, each reading its rank's stream from a real `segpipe serve`.

Each rank all-reduces once per batch, as DDP's backward does, so unequal
batch counts would hang (the process group's timeout turns a hang into a
failure). LOCAL_RANK is 0 in both processes, as on two single-GPU nodes: the
stream rank must come from the global rank."""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import sys
import tempfile
import unittest

import harness

WORLD = 2


def _rank_main(rank: int, init: str, addr: str, out: str, sys_path: list) -> None:
    sys.path[:0] = [p for p in sys_path if p not in sys.path]
    os.environ["LOCAL_RANK"] = "0"
    import torch
    import torch.distributed as dist

    from segpipe import FlightBatches

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    try:
        fb = FlightBatches(addr, "odd", batch_size=16, imgsz=64, start={"seed": 5})
        res = {"rank": fb.rank, "world": fb.world_size, "epochs": []}
        for epoch in range(2):
            fb.set_epoch(epoch)
            n = len(fb)
            ids = []
            for b in fb:
                t = torch.ones(1)
                dist.all_reduce(t)  # a collective per step, as DDP's backward
                ids += b["image_id"].tolist()
            res["epochs"].append({"len": n, "ids": ids})
        val = FlightBatches(addr, "odd", batch_size=16, imgsz=64, val=True)
        res["val"] = {"len": len(val), "ids": [i for b in val for i in b["image_id"].tolist()]}
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(res, f)


def _loader_rank_main(rank: int, init: str, shards: str, out: str, sys_path: list) -> None:
    # segpipe.Loader on a damaged set: ranks skip different samples, and
    # must still step together (even batches pad the rank that runs out).
    sys.path[:0] = [p for p in sys_path if p not in sys.path]
    import torch
    import torch.distributed as dist

    from segpipe import Loader

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    try:
        ld = Loader(shards, batch_size=2, imgsz=64, seed=3, workers=2)
        n, steps = len(ld), 0
        for _ in ld:
            t = torch.ones(1)
            dist.all_reduce(t)
            steps += 1
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump({"len": n, "steps": steps, "padded": ld.padded}, f)


def _run_ranks(test: unittest.TestCase, target, arg: str) -> list:
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "pg")
        outs = [os.path.join(d, f"rank{r}.json") for r in range(WORLD)]
        procs = [ctx.Process(target=target, args=(r, init, arg, outs[r], list(sys.path))) for r in range(WORLD)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(240)
        for r, p in enumerate(procs):
            if p.is_alive():
                p.kill()
                test.fail(f"rank {r} did not finish in 240 s (unequal batch counts hang DDP)")
            test.assertEqual(p.exitcode, 0, f"rank {r} failed")
        res = []
        for o in outs:
            with open(o) as f:
                res.append(json.load(f))
    return res


class LoaderDDPTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.require("torch", "torch.distributed", "pyarrow")
        import torch.distributed as dist

        if not dist.is_gloo_available():
            raise unittest.SkipTest("torch was built without gloo")
        from test_loader import _require_library
        from test_loader_even import damaged_set

        _require_library()
        cls.bad = damaged_set()

    def test_damaged_set_ranks_step_together(self):
        res = _run_ranks(self, _loader_rank_main, self.bad)
        self.assertEqual([r["steps"] for r in res], [r["len"] for r in res])
        self.assertEqual(len({r["steps"] for r in res}), 1)
        self.assertGreater(sum(r["padded"] for r in res), 0, "no rank was padded: the set does not test this")


class DDPTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.require("torch", "torch.distributed", "pyarrow")
        import torch.distributed as dist

        if not dist.is_gloo_available():
            raise unittest.SkipTest("torch was built without gloo")
        cls.server = harness.shared_server()

    def test_two_ranks_equal_counts_disjoint_global_rank(self):
        ctx = multiprocessing.get_context("spawn")
        with tempfile.TemporaryDirectory() as d:
            init = "file://" + os.path.join(d, "pg")
            outs = [os.path.join(d, f"rank{r}.json") for r in range(WORLD)]
            procs = [ctx.Process(target=_rank_main, args=(r, init, self.server.addr, outs[r], list(sys.path))) for r in range(WORLD)]
            for p in procs:
                p.start()
            for p in procs:
                p.join(240)
            for r, p in enumerate(procs):
                if p.is_alive():
                    p.kill()
                    self.fail(f"rank {r} did not finish in 240 s (unequal batch counts hang DDP)")
                self.assertEqual(p.exitcode, 0, f"rank {r} failed")
            res = []
            for o in outs:
                with open(o) as f:
                    res.append(json.load(f))
        self.assertEqual([r["rank"] for r in res], [0, 1], "the stream rank must be the global rank, not LOCAL_RANK")
        self.assertEqual([r["world"] for r in res], [WORLD, WORLD])
        images = 129
        for e in range(2):
            eps = [r["epochs"][e] for r in res]
            # 129 images over 2 ranks: 65 and 64 samples, 5 and 4 batches of
            # 16 without even batches; 4 each with them.
            self.assertEqual([x["len"] for x in eps], [4, 4])
            a, b = (set(x["ids"]) for x in eps)
            self.assertEqual(len(a) + len(b), len(a | b), f"epoch {e}: ranks overlap")
            self.assertEqual(len(a | b), images - 1, f"epoch {e}: all but one sample (world_size - 1 at most) are read")
        self.assertNotEqual(res[0]["epochs"][0]["ids"], res[0]["epochs"][1]["ids"], "epochs must differ (shuffle by epoch)")
        # validation keeps every image: ranks split the set, uneven counts allowed
        va, vb = (set(r["val"]["ids"]) for r in res)
        self.assertEqual(len(va | vb), images)
        self.assertEqual(len(va) + len(vb), images)
        self.assertEqual([r["val"]["len"] for r in res], [5, 4])


if __name__ == "__main__":
    unittest.main()
