"""A real `segpipe serve` on loopback for the integration tests.

The segpipe binary comes from SEGPIPE_BINARY (CI builds it once) or is built
here with `go build` into a temporary folder. The data set is synthetic
(`segpipe synth`, seeded, so every run sees the same bytes), converted into
a shard root with two sets, ``synth`` (64 images) and ``odd`` (129 images,
for uneven rank splits). Nothing here stands in for a production class: the
tests drive the package's own FlightBatches and trainer against this server.

Integration tests call ``require()``; it raises unittest.SkipTest naming
what is missing, unless SEGPIPE_REQUIRE_STACK=1 (CI), where a missing part
is a failure.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import _path

REQUIRED = os.environ.get("SEGPIPE_REQUIRE_STACK") == "1"

_lock = threading.Lock()
_state: dict = {}


def require(*modules: str) -> None:
    """Skip (or, with SEGPIPE_REQUIRE_STACK=1, fail) unless every module
    imports and a segpipe binary is at hand."""
    import importlib

    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as e:
            why = f"{m} does not import: {e}"
            if REQUIRED:
                raise AssertionError(why + " (SEGPIPE_REQUIRE_STACK=1)")
            raise unittest.SkipTest(why)
    try:
        binary()
    except RuntimeError as e:
        if REQUIRED:
            raise AssertionError(str(e))
        raise unittest.SkipTest(str(e))


def workdir() -> str:
    with _lock:
        if "work" not in _state:
            d = tempfile.mkdtemp(prefix="segpipe-pytest-")
            atexit.register(shutil.rmtree, d, True)
            _state["work"] = d
        return _state["work"]


def binary() -> str:
    """The segpipe binary: $SEGPIPE_BINARY, or one built from this checkout."""
    with _lock:
        if "binary" in _state:
            return _state["binary"]
    b = os.environ.get("SEGPIPE_BINARY")
    if not b:
        if shutil.which("go") is None:
            raise RuntimeError("no segpipe binary: set SEGPIPE_BINARY or put go on PATH")
        b = os.path.join(workdir(), "segpipe")
        env = dict(os.environ, CGO_ENABLED="0")
        p = subprocess.run(["go", "build", "-o", b, "."], cwd=_path.REPO, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"go build failed: {p.stderr[-2000:]}")
    if not os.access(b, os.X_OK):
        raise RuntimeError(f"segpipe binary {b} is not executable")
    with _lock:
        _state["binary"] = b
    return b


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the segpipe binary; raises with its stderr when it fails."""
    p = subprocess.run([binary(), *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"segpipe {' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-1500:]}")
    return p


#: Shard sets below shard_root(): name -> (images, synth seed).
SETS = {"synth": (64, 7), "odd": (129, 11)}


def shard_root() -> str:
    """The converted shard root (made once per process)."""
    with _lock:
        if "root" in _state:
            return _state["root"]
    root = os.path.join(workdir(), "shards")
    for name, (n, seed) in SETS.items():
        src = os.path.join(workdir(), "synth-" + name)
        run("synth", "--out", src, "--images", str(n), "--seed", str(seed), "--max-side", "256")
        run(
            "convert", "coco",
            "--annotations", os.path.join(src, "annotations", "instances_train.json"),
            "--images", os.path.join(src, "images"),
            "--out", os.path.join(root, name),
            "--shard-size", "1MiB",
        )  # fmt: skip
    with _lock:
        _state["root"] = root
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`segpipe serve` over shard_root() (or ``root``) on a loopback port.

    ``args`` are extra flags (--max-streams 1, --token, --tls-cert ...). The
    port is kept across kill()/start(), so a client can reconnect to the
    restarted server."""

    def __init__(self, *args: str, port: int | None = None, root: str | None = None, log: str | None = None):
        self.args = list(args)
        self.port = port or free_port()
        self.root = root  # default: shard_root()
        self.proc: subprocess.Popen | None = None
        self.log = log or os.path.join(workdir(), f"serve-{self.port}.log")
        self.scheme = "grpc+tls" if "--tls-cert" in self.args else "grpc"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def location(self) -> str:
        return f"{self.scheme}://{self.addr}"

    def start(self) -> "Server":
        root = self.root or shard_root()
        f = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [binary(), "serve", "--shards", root, "--addr", self.addr, "--workers", "2", "--max-memory", "4GiB", *self.args],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
        f.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"segpipe serve exited {self.proc.returncode}: {self.tail()}")
            if re.search(r"segpipe serve: grpc(\+tls)?://", self.tail()):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"segpipe serve did not start in 30 s: {self.tail()}")

    def tail(self, n: int = 3000) -> str:
        try:
            with open(self.log, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """kill -9: the server dies mid-whatever, as a crashed pod would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its socket but never answers (a hung
        server); resume() undoes it."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def shared_server() -> Server:
    """One plain server for the tests that need nothing special (stopped at
    exit)."""
    with _lock:
        s = _state.get("server")
    if s is None or s.proc is None or s.proc.poll() is not None:
        s = Server().start()
        atexit.register(s.stop)
        with _lock:
            _state["server"] = s
    return s


def dump(shards: str, batches: int, *, batch: int, imgsz: int, seed: int, epoch: int = 0, val: bool = False, mosaic: float | None = None) -> str:
    """`segpipe dump` of the first batches of a rank-0-of-1 stream; returns
    the Arrow IPC file's path."""
    out = os.path.join(workdir(), f"dump-{os.path.basename(shards)}-{batches}-{batch}-{imgsz}-{seed}-{epoch}-{int(val)}-{mosaic}.arrows")
    if os.path.exists(out):
        return out
    args = ["dump", "--shards", os.path.join(shard_root(), shards), "--batches", str(batches), "--batch", str(batch)]
    args += ["--imgsz", str(imgsz), "--seed", str(seed), "--epoch", str(epoch), "--out", out]
    if val:
        args.append("--val")
    if mosaic is not None:
        args += ["--mosaic", str(mosaic)]
    run(*args)
    return out


def self_signed_cert() -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, made with openssl (the CA
    file a client trusts is the certificate itself)."""
    d = os.path.join(workdir(), "tls")
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    if not os.path.exists(cert):
        os.makedirs(d, exist_ok=True)
        if shutil.which("openssl") is None:
            raise unittest.SkipTest("openssl is not installed")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
            check=True, capture_output=True,
        )  # fmt: skip
    return cert, key


def manifest_images(name: str) -> int:
    with open(os.path.join(shard_root(), name, "manifest.json")) as f:
        m = json.load(f)
    return int(m.get("images") or sum(s.get("images", s.get("rows", 0)) for s in m.get("shards", [])))
