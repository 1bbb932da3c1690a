"""The `segpipe` console script (segpipe._cli): the Go command line run
inside Python through the loader library's segpipe_cli. Its conversion's
shards are byte-identical to the segpipe binary's, `inspect --verify`
passes on them, exit codes are the binary's, SIGINT ends a conversion as it
ends the binary's (and --resume finishes it), and `segpipe version` prints
segpipe.__version__ for a library built by the package.

With SEGPIPE_TEST_INSTALLED=1 (CI, the installed wheel) the script is the
one pip put beside this Python; otherwise ``python -m segpipe._cli`` from
the checkout, with the library beside the package or $SEGPIPE_LIBRARY. Needs
a segpipe binary (harness.binary) and the library."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import unittest

import _path
import harness


def _require_library() -> None:
    harness.require()
    from segpipe import _cli

    if not os.path.exists(_cli._library_path()):
        why = f"no loader library at {_cli._library_path()} (pip install ./python, or set SEGPIPE_LIBRARY)"
        if harness.REQUIRED:
            raise AssertionError(why)
        raise unittest.SkipTest(why)


def console() -> list[str]:
    """The command that runs the console script."""
    if os.environ.get("SEGPIPE_TEST_INSTALLED") == "1":
        script = os.path.join(sysconfig.get_path("scripts"), "segpipe")
        if not os.path.exists(script):
            raise AssertionError(f"SEGPIPE_TEST_INSTALLED=1 but pip installed no console script at {script}")
        return [script]
    return [sys.executable, "-m", "segpipe._cli"]


def console_env() -> dict:
    env = dict(os.environ)
    if os.environ.get("SEGPIPE_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_path.PYTHON_DIR, env.get("PYTHONPATH")) if p)
    return env


def read_tree(root: str) -> dict[str, bytes]:
    """Every file below root, by relative path."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


class ConsoleScriptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _require_library()
        cls.work = os.path.join(harness.workdir(), "cli-wheel")
        cls.src = os.path.join(cls.work, "synth")
        harness.run("synth", "--out", cls.src, "--images", "40", "--seed", "5", "--max-side", "128")
        cls.ann = os.path.join(cls.src, "annotations", "instances_train.json")
        cls.images = os.path.join(cls.src, "images")

    def convert_args(self, ann: str, out: str) -> list[str]:
        return ["convert", "coco", "--annotations", ann, "--images", self.images, "--out", out, "--shard-size", "64KiB"]

    def run_console(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([*console(), *args], env=console_env(), capture_output=True, text=True, timeout=300, **kw)

    def test_convert_and_verify_match_the_binary(self):
        go_out = os.path.join(self.work, "go-shards")
        py_out = os.path.join(self.work, "py-shards")
        harness.run(*self.convert_args(self.ann, go_out))
        p = self.run_console(*self.convert_args(self.ann, py_out))
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertIn("wrote 40 images", p.stdout)
        go, py = read_tree(go_out), read_tree(py_out)
        self.assertGreater(len([f for f in go if f.endswith(".parquet")]), 1, "want several shards")
        self.assertEqual(sorted(go), sorted(py))
        for name in go:
            self.assertEqual(go[name], py[name], f"{name} differs from the binary's")
        v = self.run_console("inspect", py_out, "--verify")
        self.assertEqual(v.returncode, 0, v.stderr[-2000:])
        want = harness.run("inspect", go_out, "--verify").stdout
        self.assertEqual(v.stdout.replace(py_out, go_out), want)

    def test_exit_codes_are_the_binary_s(self):
        cases = [
            ("version", ["version"], 0),
            ("unknown flag", ["convert", "coco", "--no-such-flag"], 2),
            ("group without a command", ["convert"], 2),
            ("stray argument", ["version", "extra"], 2),
            ("missing shards", ["inspect", os.path.join(self.work, "no-such-dir")], None),
        ]
        for name, args, want in cases:
            with self.subTest(name):
                p = self.run_console(*args)
                b = subprocess.run([harness.binary(), *args], capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, b.returncode, p.stderr[-1000:])
                if want is not None:
                    self.assertEqual(p.returncode, want)
                # The first line of the error is the binary's (help text
                # printed before it names the program the same way).
                self.assertEqual(p.stderr.strip().splitlines()[-1:], b.stderr.strip().splitlines()[-1:])

    def test_version_is_the_package_s(self):
        # Only a library built by the package's setup.py has its version;
        # a checkout's (scripts/build-native.sh alone) keeps the default.
        if os.environ.get("SEGPIPE_TEST_INSTALLED") != "1" or os.environ.get("SEGPIPE_LIBRARY"):
            self.skipTest("needs the installed wheel's own library (SEGPIPE_TEST_INSTALLED=1, no SEGPIPE_LIBRARY)")
        import segpipe

        p = self.run_console("version")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines()[0], f"segpipe {segpipe.__version__}")

    def interrupted(self, cmd: list[str], env: dict | None, name: str) -> tuple[subprocess.CompletedProcess, str]:
        """Runs a conversion whose annotations come through a FIFO, sends it
        SIGINT once it has opened the FIFO (so the command is past its
        signal setup), then lets it read the annotations."""
        d = os.path.join(self.work, "sigint-" + name)
        os.makedirs(d)
        fifo = os.path.join(d, "ann.json")
        os.mkfifo(fifo)
        out = os.path.join(d, "shards")
        proc = subprocess.Popen([*cmd, *self.convert_args(fifo, out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            with open(fifo, "wb") as w:  # returns once the command opened it
                proc.send_signal(signal.SIGINT)
                with open(self.ann, "rb") as f:
                    w.write(f.read())
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), out

    def test_sigint_ends_a_conversion_as_in_the_binary(self):
        b, _ = self.interrupted([harness.binary()], None, "go")
        p, out = self.interrupted(console(), console_env(), "py")
        self.assertEqual(p.returncode, b.returncode, p.stderr[-2000:])
        self.assertEqual(p.returncode, 1, p.stderr[-2000:])
        self.assertIn("segpipe: context canceled", p.stderr)
        # The interrupted output resumes to the uninterrupted conversion.
        r = self.run_console(*self.convert_args(self.ann, out), "--resume")
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        full = os.path.join(self.work, "sigint-full")
        harness.run(*self.convert_args(self.ann, full))
        self.assertEqual(read_tree(out), read_tree(full))

    def test_sigint_ends_a_command_that_does_not_catch_it(self):
        # inspect installs no handler: the binary dies of SIGINT, and so
        # must the console script, at once (not when Go returns to Python,
        # which is what Python's own SIGINT handler would do). inspect
        # blocks opening the FIFO until the writer below opens it.
        for name, cmd, env in (("go", [harness.binary()], None), ("py", console(), console_env())):
            with self.subTest(name):
                d = os.path.join(self.work, "sigint-inspect-" + name)
                os.makedirs(d)
                os.mkfifo(os.path.join(d, "manifest.json"))
                proc = subprocess.Popen([*cmd, "inspect", d], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                try:
                    with open(os.path.join(d, "manifest.json"), "wb"):
                        proc.send_signal(signal.SIGINT)
                        # Held open: inspect's read would block until this
                        # writer closes, so only the signal can end it.
                        code = proc.wait(timeout=60)
                    self.assertEqual(code, -signal.SIGINT, proc.stderr.read()[-2000:])
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                    proc.stdout.close()
                    proc.stderr.close()


if __name__ == "__main__":
    unittest.main()
