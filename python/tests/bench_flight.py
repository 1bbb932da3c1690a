"""Throughput of the Python consumers against `segpipe bench`, in one run.

    python python/tests/bench_flight.py --binary ./segpipe --shards shards/val2017 \\
        [--batch 16] [--imgsz 640] [--epochs 3] [--workers 0] [--rounds 3] [--json out.json]

Each round runs, one after the other on the same cores and settings (seed,
batch, imgsz, epochs): `segpipe bench` (the Go loader alone, no consumer),
segpipe.Loader (the same loader in this process, through the Arrow C stream
interface; when its library is installed), then FlightBatches over loopback
from a `segpipe serve` of the same set, with dense and with windowed masks.
For the Python side it reports batches/s,
images/s, GB/s of tensors handed to the consumer, and the CPU seconds the
Python process spent per batch (all its threads: gRPC, the prefetch thread,
numpy, the consumer; for Loader also the Go loader's threads, which run in
it), beside the server's CPU per batch. The first batch of
each stream (connection, loader start) is inside the timing, as it is in
bench. Prints a table and, with --json, writes every round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _path  # noqa: E402,F401
import harness  # noqa: E402


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, seconds (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def go_bench(a) -> dict:
    cmd = [a.binary, "bench", "--shards", a.shards, "--batch", str(a.batch), "--imgsz", str(a.imgsz)]
    cmd += ["--epochs", str(a.epochs), "--seed", str(a.seed), "--workers", str(a.workers), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    r = json.loads(p.stdout)
    return {"images_per_s": r["images_per_s"], "batches_per_s": r["batches"] / r["wall_s"], "batches": r["batches"], "cpu_s": r["cpu_s"]}


def python_stream(a, server: harness.Server | None, masks: str) -> dict:
    """FlightBatches from server, or segpipe.Loader in this process when
    server is None."""
    from segpipe.batch import TENSOR_KEYS

    if server is None:
        from segpipe import Loader

        fb = Loader(a.shards, rank=0, world_size=1, batch_size=a.batch, imgsz=a.imgsz, masks=masks,
                    seed=a.seed, workers=a.workers, epochs=a.epochs)  # fmt: skip
        fb.images()
    else:
        from segpipe import FlightBatches

        fb = FlightBatches(server.addr, os.path.basename(a.shards), rank=0, world_size=1, batch_size=a.batch,
                           imgsz=a.imgsz, masks=masks, start={"seed": a.seed}, epochs=a.epochs, timeout=300)  # fmt: skip
        fb.dataset_info()  # not timed: one GetFlightInfo before training starts
    srv0 = proc_cpu(server.proc.pid) if server else 0.0
    cpu0, t0 = time.process_time(), time.monotonic()
    n = images = nbytes = 0
    for _ in range(a.epochs):
        for b in fb:
            n += 1
            images += b["images"].shape[0]
            nbytes += sum(b[k].numel() * b[k].element_size() for k in TENSOR_KEYS)
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    srv = proc_cpu(server.proc.pid) - srv0 if server else 0.0
    fb.close()
    return {
        "batches": n,
        "batches_per_s": n / wall,
        "images_per_s": images / wall,
        "GB_per_s": nbytes / wall / 1e9,
        "python_cpu_ms_per_batch": 1e3 * cpu / n,
        "server_cpu_ms_per_batch": 1e3 * srv / n,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--shards", required=True, help="a converted shard set (its folder is served as the root)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    a.shards = os.path.abspath(a.shards)
    os.environ["SEGPIPE_BINARY"] = os.path.abspath(a.binary)
    harness._state["root"] = os.path.dirname(a.shards)  # serve the set's parent folder
    from segpipe import loader as _loader

    have_loader = os.path.exists(_loader.library_path())
    if not have_loader:
        print(f"no loader library at {_loader.library_path()}: segpipe.Loader not measured", flush=True)
    rounds = []
    server = harness.Server("--workers", str(a.workers)).start()
    try:
        for r in range(a.rounds):
            row = {"go_bench": go_bench(a)}
            if have_loader:
                for masks in ("dense", "windowed"):
                    row[f"loader_{masks}"] = python_stream(a, None, masks)
            for masks in ("dense", "windowed"):
                row[f"flight_{masks}"] = python_stream(a, server, masks)
            rounds.append(row)
            print(f"round {r}: " + ", ".join(f"{k} {v['images_per_s']:.1f} img/s" for k, v in row.items()), flush=True)
    finally:
        server.stop()
    med = {k: statistics.median(x[k]["images_per_s"] for x in rounds) for k in rounds[0]}
    print(f"\n{a.rounds} rounds, batch {a.batch}, imgsz {a.imgsz}, {a.epochs} epochs of {os.path.basename(a.shards)}, "
          f"{os.cpu_count()} cores ({platform.processor() or platform.machine()})")  # fmt: skip
    print(f"{'':22} {'img/s':>8} {'ratio':>6} {'batch/s':>8} {'GB/s':>6} {'py CPU ms/b':>12} {'server CPU ms/b':>16}")
    for k in rounds[0]:
        xs = [x[k] for x in rounds]
        m = lambda f: statistics.median(x[f] for x in xs)  # noqa: E731
        extra = f"{m('GB_per_s'):6.3f} {m('python_cpu_ms_per_batch'):12.1f} {m('server_cpu_ms_per_batch'):16.1f}" if k != "go_bench" else ""
        print(f"{k:22} {med[k]:8.1f} {med[k] / med['go_bench']:6.2f} {m('batches_per_s'):8.2f} {extra}")
    if a.json:
        import pyarrow
        import torch

        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "rounds": rounds, "versions": {"pyarrow": pyarrow.__version__, "torch": torch.__version__}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
