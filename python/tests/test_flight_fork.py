"""FlightBatches in forked children: the real torch DataLoader (workers
with the "fork" start method and the default one) and a bare os.fork,
against a real `segpipe serve`. A child of a process that used gRPC is
refused with a StreamError that says what to do, and exits; a child of a
process that never connected reads the stream itself; nothing hangs.

Each scenario runs in its own interpreter under a hard timeout (its whole
process group is killed then), so a regression fails instead of hanging
the suite. Needs torch, pyarrow and a segpipe binary (harness.require)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

import _path
import harness

#: Seconds a scenario may take; each takes a few.
HARD_TIMEOUT = 120

_PRELUDE = """
import gc, json, multiprocessing, os, sys, time
sys.path.insert(0, {python_dir!r})
import torch
from torch.utils.data import DataLoader
from segpipe import FlightBatches, StreamError

ADDR = {addr!r}

def stream(**kw):
    args = dict(rank=0, world_size=1, batch_size=4, imgsz=64, start={{"seed": 3}}, limit=3, timeout=20)
    args.update(kw)
    return FlightBatches(ADDR, "synth", **args)

def loader(fb, workers, context):
    ctx = multiprocessing.get_context(context) if context else None
    return DataLoader(fb, batch_size=None, num_workers=workers, multiprocessing_context=ctx)

def outcome(f):
    t = time.monotonic()
    try:
        got = f()
        return {{"ok": [b["image_id"].tolist() for b in got], "s": time.monotonic() - t}}
    except Exception as e:
        return {{"error": type(e).__name__, "message": str(e), "s": time.monotonic() - t}}

def report(**kw):
    print("RESULT " + json.dumps(kw), flush=True)
"""


def run_scenario(tc: unittest.TestCase, body: str) -> dict:
    """Runs body after the prelude in a fresh interpreter; returns the
    RESULT it printed."""
    # The guard: a spawned worker imports the script again.
    main = "\nif __name__ == '__main__':\n" + textwrap.indent(textwrap.dedent(body), "    ")
    code = _PRELUDE.format(python_dir=_path.PYTHON_DIR, addr=tc.server.addr) + main
    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=harness.workdir(), delete=False) as f:
        f.write(code)
    p = subprocess.Popen([sys.executable, f.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=HARD_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the workers too
        out, err = p.communicate()
        tc.fail(f"scenario hung for {HARD_TIMEOUT} s:\n{out[-2000:]}\n{err[-3000:]}")
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    tc.assertEqual(p.returncode, 0, f"scenario exited {p.returncode}:\n{out[-2000:]}\n{err[-3000:]}")
    tc.assertEqual(len(lines), 1, f"no result:\n{out[-2000:]}\n{err[-3000:]}")
    return json.loads(lines[0][len("RESULT ") :])


class ForkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.require("pyarrow", "pyarrow.flight", "torch")
        cls.server = harness.shared_server()

    def test_worker_forked_after_the_parent_connected_is_refused(self):
        r = run_scenario(
            self,
            """
            fb = stream()
            n = len(fb)               # GetFlightInfo: gRPC is in use here
            first = list(iter(fb))    # and a whole pass
            res = {"len": n, "first": [b["image_id"].tolist() for b in first]}
            for ctx in ("fork", None):  # None: the platform's default (fork on Linux before 3.14)
                res[f"one worker {ctx}"] = outcome(lambda: list(loader(fb, 1, ctx)))
                res[f"two workers {ctx}"] = outcome(lambda: list(loader(fb, 2, ctx)))
            # the stream is still usable in the parent, and through spawn
            fb.set_epoch(0)
            res["parent after"] = outcome(lambda: list(fb))
            res["parent again"] = outcome(lambda: list(stream()))
            res["spawn"] = outcome(lambda: list(loader(stream(), 1, "spawn")))
            report(**res)
            """,
        )
        self.assertEqual(r["len"], 3)
        for ctx in ("fork", "None"):
            one = r[f"one worker {ctx}"]
            self.assertEqual(one.get("error"), "StreamError", one)
            self.assertIn("fork of process", one["message"])
            self.assertIn("multiprocessing_context='spawn'", one["message"])
            two = r[f"two workers {ctx}"]
            self.assertIn("error", two, two)
            self.assertIn("num_workers", two["message"])
        self.assertEqual(r["parent after"].get("ok"), r["first"], r["parent after"])
        self.assertEqual(r["spawn"].get("ok"), r["first"], r["spawn"])

    def test_worker_forked_before_any_connection_reads_the_stream(self):
        r = run_scenario(
            self,
            """
            res = {}
            for ctx in ("fork", None):
                # a comprehension, not list(): list() asks len(), which connects
                res[str(ctx)] = outcome(lambda: [b for b in loader(stream(), 1, ctx)])
            res["parent"] = outcome(lambda: list(stream()))  # gRPC starts here, after the forks
            report(**res)
            """,
        )
        want = r["parent"].get("ok")
        self.assertEqual(len(want or []), 3, r["parent"])
        for ctx in ("fork", "None"):
            self.assertEqual(r[ctx].get("ok"), want, f"{ctx}: {r[ctx]}")

    def test_bare_fork_child_drops_what_it_inherited_and_exits(self):
        r = run_scenario(
            self,
            """
            fb = stream(limit=0, prefetch=2)
            it = iter(fb)
            next(it)              # a live stream and a read-ahead thread at the fork
            time.sleep(0.5)
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:
                # The child: nothing here may call into the parent's gRPC
                # objects; an iteration is refused; a normal exit (with the
                # interpreter's shutdown) must not hang.
                os.close(rfd)
                child = outcome(lambda: [next(iter(fb))])
                fb.close()
                del fb
                gc.collect()
                child["closed"] = True
                os.write(wfd, json.dumps(child).encode())
                os.close(wfd)
                sys.exit(0)
            os.close(wfd)
            deadline = time.monotonic() + 60
            status = None
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.05)
            else:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            with os.fdopen(rfd) as f:
                child = json.loads(f.read() or "{}")
            more = sum(1 for _ in zip(range(3), it))  # the parent's stream goes on
            it.close()
            fb.close()
            report(child_status=status, child=child, parent_more=more)
            """,
        )
        self.assertEqual(r["child_status"], 0, "the child did not exit by itself (killed, or exited non-zero)")
        self.assertEqual(r["child"].get("error"), "StreamError", r["child"])
        self.assertIn("fork of process", r["child"]["message"])
        self.assertTrue(r["child"].get("closed"), r["child"])
        self.assertEqual(r["parent_more"], 3)


if __name__ == "__main__":
    unittest.main()
