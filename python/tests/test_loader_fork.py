"""A forked child that inherited a live segpipe.Loader (mid-pass, batches
held) exits: by os.fork with a normal interpreter exit, and as a DataLoader
worker with the fork start method, which gets the clear error. Each case
runs in its own interpreter under a hard timeout, so a regression fails
instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import unittest

import harness
from test_loader import _require_library

_PRELUDE = """
import gc, os, sys
sys.path[:0] = {path!r}
from segpipe import Loader
ld = Loader({shards!r}, batch_size=4, imgsz=64, workers=2, epochs=2, rank=0, world_size=1)
it = iter(ld)
held = [next(it) for _ in range(2)]  # a pass suspended mid-epoch, batches held
"""

_FORK = """
pid = os.fork()
if pid == 0:
    try:
        list(Loader({shards!r}, batch_size=4, imgsz=64, limit=1, rank=0, world_size=1))
        print("child: no error", flush=True)
    except RuntimeError as e:
        print("child:", e, flush=True)
    del held
    gc.collect()
    sys.exit(0)  # a normal exit: finalizers, generators' finally blocks, collection
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status), flush=True)
"""

_DATALOADER = """
import torch.utils.data
dl = torch.utils.data.DataLoader(ld, batch_size=None, num_workers=1, multiprocessing_context="fork")
try:
    next(iter(dl))
    print("worker: no error", flush=True)
except RuntimeError as e:
    print("worker:", e, flush=True)
"""


class ForkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _require_library()
        cls.shards = os.path.join(harness.shard_root(), "synth")

    def run_script(self, body: str) -> str:
        src = textwrap.dedent(_PRELUDE + body).format(path=sys.path, shards=self.shards)
        try:
            p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired as e:
            self.fail(f"hung: a forked child did not exit (output {e.stdout!r})")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return p.stdout

    def test_os_fork_child_exits_and_is_refused(self):
        out = self.run_script(_FORK)
        self.assertIn("child status 0", out)
        self.assertIn("num_workers=0", out)

    def test_dataloader_fork_worker_is_refused_and_exits(self):
        out = self.run_script(_DATALOADER)
        self.assertIn("num_workers=0", out)


if __name__ == "__main__":
    unittest.main()
