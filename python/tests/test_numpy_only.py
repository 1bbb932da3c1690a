"""segpipe with pyarrow and numpy only (``pip install segpipe``, no extra):
``import segpipe`` and ``Loader(...).record_batches()`` work and import no
torch, ``numpy_batch`` of each record is byte-identical to `segpipe dump`
and a view of the record's buffers, and every torch feature raises an
ImportError naming its extra. And where Go is missing or too old, building
the package from source (the sdist) stops with one line that says so.

The checks run in a child interpreter that refuses to import torch (a
meta-path finder raises ModuleNotFoundError for it, as a missing package
does), so they hold in a numpy-only virtual environment and in the full one,
where torch is installed (and already imported by the other tests of this
process). Needs pyarrow, numpy, a segpipe binary (for dump and the test
shards) and the loader library (installed with the package, or
SEGPIPE_LIBRARY)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

B, S, SEED = 8, 128, 3
PER_EPOCH, EPOCHS = 8, 2  # 8 batches of 8 per epoch of the 64-image set
TORCH_EXTRA = "segpipe[torch]"
ULTRALYTICS_EXTRA = "segpipe[ultralytics]"


class _RefuseTorch:
    """A meta-path finder for which torch is not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (refused by test_numpy_only)", name=name)
        return None


def _child(shards: str, dump: str) -> dict:
    """The checks, in a process where torch does not import."""
    sys.meta_path.insert(0, _RefuseTorch())
    sys.path.insert(0, HERE)
    import _path  # noqa: F401  (the checkout's package, or the installed one)
    import numpy as np
    import pyarrow as pa

    import segpipe
    from segpipe.batch import TENSOR_KEYS, _storage

    assert "torch" not in sys.modules, "import segpipe imported torch"
    with pa.ipc.open_stream(dump) as r:
        records = list(r)
    want = [segpipe.numpy_batch(rb) for rb in records]
    # numpy_batch against pyarrow's own conversion (which copies).
    for i, rb in enumerate(records):
        for key, col, dtype in (("images", "image", np.uint8), ("boxes", "boxes", np.float32), ("classes", "classes", np.int32)):
            flat = _storage(rb.column(col))
            while hasattr(flat, "flatten"):
                flat = _storage(flat.flatten())
            mine = want[i][key].reshape(-1)
            theirs = flat.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
            assert mine.tobytes() == theirs.tobytes(), f"dump batch {i}: numpy_batch's {key} differs from pyarrow's"
    assert len(want) == PER_EPOCH * EPOCHS, f"the dump holds {len(want)} batches"
    compared = 0
    for masks in ("dense", "windowed"):
        ld = segpipe.Loader(shards, batch_size=B, imgsz=S, seed=SEED, rank=0, world_size=1, masks=masks, workers=2)
        i = 0
        for epoch in range(EPOCHS):
            reader = ld.record_batches()
            assert isinstance(reader, pa.RecordBatchReader), type(reader)
            for rb in reader:
                got = segpipe.numpy_batch(rb)
                where = f"{masks} epoch {epoch} batch {i}"
                assert i < len(want), f"{where}: more batches than the dump's {len(want)}"
                if masks == "dense":
                    assert rb.equals(records[i]), f"{where}: the Arrow record differs from segpipe dump's"
                for k in TENSOR_KEYS:
                    g, w = got[k], want[i][k]
                    assert isinstance(g, np.ndarray), f"{where}: {k} is {type(g)}"
                    assert (g.dtype, g.shape) == (w.dtype, w.shape), f"{where}: {k} {g.dtype}{g.shape}, dump {w.dtype}{w.shape}"
                    assert g.tobytes() == w.tobytes(), f"{where}: {k} differs from segpipe dump"
                # No copy: the images are the record's own bytes.
                flat = _storage(rb.column(0)).flatten()
                assert got["images"].ctypes.data == flat.buffers()[1].address + flat.offset, f"{where}: images were copied"
                i += 1
                compared += 1
        assert i == len(want), f"{masks}: {i} batches over {EPOCHS} epochs, the dump has {len(want)}"
        assert ld.state_dict() == {"seed": SEED, "epoch": EPOCHS, "consumed": 0}, ld.state_dict()
    assert "torch" not in sys.modules, "the Loader's record batches imported torch"

    # Each torch feature, used without torch: the ImportError names the extra.
    from segpipe.batch import to_tensors

    ld = segpipe.Loader(shards, batch_size=B, imgsz=S, seed=SEED, rank=0, world_size=1)
    features = {
        "iterating a Loader": lambda: iter(ld),
        "Loader(device=)": lambda: segpipe.Loader(shards, device="cpu"),
        "Loader(pin_memory=True)": lambda: segpipe.Loader(shards, pin_memory=True),
        "to_tensors": lambda: to_tensors(want[0]),
        # Made without a connection; its batches are tensors.
        "iterating FlightBatches": lambda: iter(segpipe.FlightBatches("127.0.0.1:1", "synth", rank=0, world_size=1)),
        "segpipe.ultralytics": lambda: __import__("segpipe.ultralytics"),
    }
    messages = {}
    for what, f in features.items():
        extra = ULTRALYTICS_EXTRA if what == "segpipe.ultralytics" else TORCH_EXTRA
        try:
            f()
        except ImportError as e:
            assert f"pip install '{extra}'" in str(e), f"{what}: ImportError {e!r} does not name {extra}"
            messages[what] = str(e)
            continue
        raise AssertionError(f"{what} worked without torch")
    assert "torch" not in sys.modules
    return {"batches": compared, "messages": messages}


class NumpyOnlyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import harness

        harness.require("numpy", "pyarrow")
        from segpipe import loader

        if not os.path.exists(loader.library_path()):
            why = f"no loader library at {loader.library_path()} (pip install ./python, or set SEGPIPE_LIBRARY)"
            if harness.REQUIRED:
                raise AssertionError(why)
            raise unittest.SkipTest(why)
        cls.shards = os.path.join(harness.shard_root(), "synth")
        cls.dump = harness.dump("synth", PER_EPOCH * EPOCHS, batch=B, imgsz=S, seed=SEED)

    def test_loader_records_and_numpy_batches_without_torch(self):
        p = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", self.shards, self.dump],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        self.assertEqual(p.returncode, 0, f"the numpy-only child failed:\n{p.stderr[-4000:]}")
        out = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual(out["batches"], 2 * PER_EPOCH * EPOCHS, out)  # dense and windowed
        self.assertEqual(len(out["messages"]), 6, out)


class MetadataTest(unittest.TestCase):
    def test_base_needs_pyarrow_and_numpy_and_extras_bring_torch(self):
        reqs = _requirements()
        base = sorted(_name(r) for r in reqs if "extra ==" not in r)
        self.assertEqual(base, ["numpy", "pyarrow"], reqs)
        torch = sorted(_name(r) for r in reqs if 'extra == "torch"' in r)
        ul = sorted(_name(r) for r in reqs if 'extra == "ultralytics"' in r)
        self.assertEqual(torch, ["torch"], reqs)
        self.assertEqual(ul, ["torch", "ultralytics"], reqs)


class SourceBuildTest(unittest.TestCase):
    """setup.py's build without a usable Go: one line, before compiling."""

    def build(self, extra_path: list[str]) -> subprocess.CompletedProcess:
        try:
            from setuptools.command.bdist_wheel import bdist_wheel  # noqa: F401  (setup.py's needs)
        except ImportError:
            raise unittest.SkipTest("setuptools >= 70.1 is not installed") from None
        # PATH without any go: the folders holding one are left out.
        dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not os.path.exists(os.path.join(d, "go"))]
        out = os.path.join(self.tmp, "build")
        env = dict(os.environ, PATH=os.pathsep.join(extra_path + dirs))
        env.pop("SEGPIPE_NATIVE", None)
        return subprocess.run(
            [sys.executable, "setup.py", "-q", "build_py", "--build-lib", out],
            cwd=os.path.dirname(HERE), env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    def setUp(self):
        import tempfile

        self.tmp = tempfile.mkdtemp(prefix="segpipe-nogo-")
        self.addCleanup(__import__("shutil").rmtree, self.tmp, True)

    def check_one_line(self, p: subprocess.CompletedProcess, *want: str) -> None:
        self.assertNotEqual(p.returncode, 0, p.stderr)
        # One line of ours, last, and no traceback (a setuptools may add
        # its own warnings above it).
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        ours = [ln for ln in lines if ln.startswith("segpipe:")]
        self.assertEqual(len(ours), 1, f"want one line, got:\n{p.stderr}")
        self.assertEqual(lines[-1], ours[0], p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        for w in want + ("segpipe wheels", "need neither"):
            self.assertIn(w, ours[0])
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "build", "segpipe", "_native", "libsegpipe.so")))

    def test_missing_go_is_one_line(self):
        self.check_one_line(self.build([]), "Go >= 1.", "go not found")

    def test_old_go_is_one_line(self):
        fake = os.path.join(self.tmp, "bin")
        os.makedirs(fake)
        with open(os.path.join(fake, "go"), "w") as f:
            f.write('#!/bin/sh\n[ "$1 $2" = "env GOVERSION" ] && echo go1.20.3 && exit 0\nexit 1\n')
        os.chmod(os.path.join(fake, "go"), 0o755)
        self.check_one_line(self.build([fake]), "found go1.20.3", "go.mod's go line")


def _name(req: str) -> str:
    import re

    return re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()


def _requirements() -> list[str]:
    """Requires-Dist of the package under test: the installed one's
    metadata, else the checkout's pyproject.toml in the same form."""
    if os.environ.get("SEGPIPE_TEST_INSTALLED") == "1":
        from importlib import metadata

        return list(metadata.requires("segpipe") or [])
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise unittest.SkipTest("tomllib needs Python 3.11 to read pyproject.toml") from None
    with open(os.path.join(os.path.dirname(HERE), "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    out = list(project.get("dependencies", []))
    for extra, reqs in project.get("optional-dependencies", {}).items():
        out += [f'{r}; extra == "{extra}"' for r in reqs]
    return out


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    print(json.dumps(_child(sys.argv[2], sys.argv[3])))
