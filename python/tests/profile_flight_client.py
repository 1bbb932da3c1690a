"""Client CPU per batch of FlightBatches, with the server and the client on
separate cores, for the receive path alone.

    SEGPIPE_BINARY=./segpipe python python/tests/profile_flight_client.py --shards DIR/train \\
        [--batch 32] [--imgsz 640] [--epochs 3] [--rounds 3] [--modes raw,dense,windowed] \\
        [--server-cpu 0] [--client-cpu 1] [--json out.json]

`segpipe serve` runs under ``taskset -c SERVER_CPU`` and this process pins
itself (and every thread it starts later: gRPC's, the prefetch thread) to
CLIENT_CPU before it imports pyarrow or torch, so neither steals the
other's core and the process's CPU time is the client's alone. Modes:

- ``raw``: pyarrow's DoGet reader alone (read_chunk, nothing converted), the
  floor of what a pyarrow client can spend: gRPC, HTTP/2, the IPC decode.
- ``dense`` / ``windowed``: FlightBatches with those masks, batches to
  torch tensors on the CPU (windowed masks expanded on the CPU).
- ``windowed-keep``: FlightBatches(masks="windowed", expand=False) where
  that option exists: masks stay windowed for the consumer to expand.
- ``native-raw``, ``native-dense``, ``native-windowed``: the same through
  the loader library's Go client (FlightBatches(transport="native"); raw:
  the library's C stream alone). Needs SEGPIPE_LIBRARY or an installed
  wheel.

Each mode is read ``rounds`` times, modes interleaved, and the median per
mode is printed: client CPU ms per batch (user + system, all threads),
server CPU ms per batch, batches. --perf FILE records the client's reads
with perf (`perf report -i FILE --no-children --sort dso,symbol`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(binary: str, root: str, cpu: int, port: int, log: str) -> subprocess.Popen:
    cmd = ["taskset", "-c", str(cpu), binary, "serve", "--shards", root, "--addr", f"127.0.0.1:{port}",
           "--workers", "0", "--max-memory", "4GiB"]  # fmt: skip
    f = open(log, "ab")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    f.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"segpipe serve exited {p.returncode}; see {log}")
        with open(log, "rb") as f:
            if b"segpipe serve: grpc://" in f.read():
                return p
        time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"segpipe serve did not start in 30 s; see {log}")


def read_raw(a, addr: str, masks: str) -> tuple[int, int]:
    """pyarrow's DoGet reader alone, every batch of the schedule."""
    import pyarrow.flight as flight
    from segpipe.request import Request, ResumeState

    req = Request(shards=a.name, start=ResumeState(seed=0), rank=0, world_size=1, batch_size=a.batch, imgsz=a.imgsz,
                  masks=masks, epochs=a.epochs).validate()  # fmt: skip
    from segpipe.flight import keep_receive_memory

    if a.keep_memory:
        keep_receive_memory()
    c = flight.FlightClient(f"grpc://{addr}")
    n = images = 0
    r = c.do_get(flight.Ticket(req.ticket()))
    while True:
        try:
            chunk = r.read_chunk()
        except StopIteration:
            break
        n += 1
        images += chunk.data.num_rows
    c.close()
    return n, images


def read_native_raw(a, addr: str, masks: str) -> tuple[int, int]:
    """The loader library's Go client alone (segpipe.h "remote"): the C
    stream imported by pyarrow, nothing converted."""
    from segpipe.loader import _Pass
    from segpipe.request import Request, ResumeState

    req = Request(shards=a.name, start=ResumeState(seed=0), rank=0, world_size=1, batch_size=a.batch, imgsz=a.imgsz,
                  masks=masks, epochs=a.epochs).validate()  # fmt: skip
    p = _Pass(json.loads(req.ticket()), {"remote": {"addr": addr}})
    n = images = 0
    while True:
        try:
            rb = p.reader.read_next_batch()
        except StopIteration:
            break
        n += 1
        images += rb.num_rows
    p.close()
    return n, images


def read_batches(a, addr: str, masks: str, keep: bool, transport: str = "pyarrow") -> tuple[int, int]:
    from segpipe import FlightBatches

    kw = {"expand": False} if keep else {}
    fb = FlightBatches(addr, a.name, rank=0, world_size=1, batch_size=a.batch, imgsz=a.imgsz, masks=masks,
                       start={"seed": 0}, epochs=a.epochs, timeout=300, transport=transport, **kw)  # fmt: skip
    n = images = 0
    for _ in range(a.epochs):
        for b in fb:
            n += 1
            images += b["images"].shape[0]
    fb.close()
    return n, images


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="a shard set; the server serves its parent folder")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="raw,dense,windowed")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--perf", help="record this process with `perf record -g` into FILE while it reads")
    ap.add_argument("--no-keep-memory", dest="keep_memory", action="store_false",
                    help="raw mode without keep_receive_memory (FlightBatches: set SEGPIPE_MALLOC_KEEP=0)")
    a = ap.parse_args()
    binary = os.environ.get("SEGPIPE_BINARY")
    if not binary:
        sys.exit("set SEGPIPE_BINARY to a segpipe binary")
    # Before pyarrow, torch or gRPC start a thread: threads inherit it.
    os.sched_setaffinity(0, {a.client_cpu})
    sys.path.insert(0, HERE)
    import _path  # noqa: F401
    import harness

    # Imported before any timing: an import costs a second or more of CPU.
    import pyarrow.flight  # noqa: F401
    import segpipe.flight  # noqa: F401  (torch with it)
    import segpipe.request  # noqa: F401

    if any(m.startswith("native-") for m in a.modes.split(",")):
        import segpipe.loader

        segpipe.loader.native()  # the Go runtime started before any timing

    a.shards = os.path.abspath(a.shards)
    a.name = os.path.basename(a.shards)
    port = harness.free_port()
    log = os.path.join(harness.workdir(), f"serve-{port}.log")
    srv = start_server(binary, os.path.dirname(a.shards), a.server_cpu, port, log)
    addr = f"127.0.0.1:{port}"
    modes = a.modes.split(",")
    perf = None
    if a.perf:
        # Attached after the imports and the server's start: the profile
        # holds the reads alone.
        perf = subprocess.Popen(["perf", "record", "-F", "1999", "-g", "-p", str(os.getpid()), "-o", a.perf],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(1)
    rows: dict[str, list[dict]] = {m: [] for m in modes}
    try:
        for r in range(a.rounds):
            for mode in modes:
                s0, c0 = proc_cpu(srv.pid), time.process_time()
                if mode == "raw":
                    n, images = read_raw(a, addr, "dense")
                elif mode == "raw-windowed":
                    n, images = read_raw(a, addr, "windowed")
                elif mode == "native-raw":
                    n, images = read_native_raw(a, addr, "dense")
                elif mode.startswith("native-"):
                    n, images = read_batches(a, addr, mode.removeprefix("native-"), False, "native")
                else:
                    n, images = read_batches(a, addr, mode.removesuffix("-keep"), mode.endswith("-keep"))
                cpu, scpu = time.process_time() - c0, proc_cpu(srv.pid) - s0
                row = {"batches": n, "images": images, "client_cpu_ms_per_batch": 1e3 * cpu / n,
                       "server_cpu_ms_per_batch": 1e3 * scpu / n}  # fmt: skip
                rows[mode].append(row)
                print(f"round {r} {mode}: {json.dumps(row)}", flush=True)
    finally:
        if perf is not None:
            perf.send_signal(2)
            perf.wait(60)
        srv.terminate()
        srv.wait(15)
    print(f"\nmedian of {a.rounds} rounds; batch {a.batch}, imgsz {a.imgsz}, {a.epochs} epochs of {a.name}; "
          f"server on cpu {a.server_cpu}, client on cpu {a.client_cpu}")  # fmt: skip
    print(f"{'mode':16} {'batches':>8} {'client CPU ms/b':>16} {'server CPU ms/b':>16}")
    med = {}
    for mode, rs in rows.items():
        m = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
        med[mode] = m
        print(f"{mode:16} {m['batches']:8.0f} {m['client_cpu_ms_per_batch']:16.1f} {m['server_cpu_ms_per_batch']:16.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "rounds": rows, "median": med}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
