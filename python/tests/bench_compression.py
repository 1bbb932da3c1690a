"""Bytes, server CPU and client CPU per image for each mask form and wire
compression: bench_flight.py's python_stream with FlightBatches(compression=...),
reading bytes and images sent from serve's transport counters.

    SEGPIPE_BINARY=./segpipe python python/tests/bench_compression.py --shards DIR/train --epochs 6 --rounds 2

DIR/train is a shard set (the server serves DIR); the uncompressed rows are the
same-session baseline."""
import argparse, functools, json, os, re, statistics, sys, urllib.request
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _path  # noqa
import harness, bench_flight
import segpipe

ap = argparse.ArgumentParser()
ap.add_argument("--shards", required=True, help="a shard set; the server serves its parent directory")
ap.add_argument("--batch", type=int, default=32); ap.add_argument("--imgsz", type=int, default=640)
ap.add_argument("--epochs", type=int, default=6); ap.add_argument("--rounds", type=int, default=2)
a = ap.parse_args(); a.seed = 0; a.workers = 0
if "SEGPIPE_BINARY" not in os.environ:
    sys.exit("set SEGPIPE_BINARY to a segpipe binary")
harness._state["root"] = os.path.dirname(a.shards)
port = harness.free_port()
srv = harness.Server("--workers", "0", "--metrics-addr", f"127.0.0.1:{port}").start()
Orig = segpipe.FlightBatches
def sent(masks, comp):
    t = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    out = []
    for n in ("bytes", "images"):
        m = re.search(rf'^segpipe_serve_transport_{n}_sent_total{{compression="{comp}",masks="{masks}"}} (\S+)$', t, re.M)
        out.append(float(m.group(1)) if m else 0.0)
    return out
rows = {}
try:
    for r in range(a.rounds):
        for masks in ("dense", "windowed"):
            for comp in ("", "lz4", "zstd"):
                label = comp or "none"
                segpipe.FlightBatches = functools.partial(Orig, compression=comp)
                b0, i0 = sent(masks, label)
                res = bench_flight.python_stream(a, srv, masks)
                b1, i1 = sent(masks, label)
                imgs = i1 - i0
                ipb = imgs / res["batches"]
                row = dict(bytes_per_image=(b1 - b0) / imgs, server_cpu_ms_per_image=res["server_cpu_ms_per_batch"] / ipb,
                           client_cpu_ms_per_image=res["python_cpu_ms_per_batch"] / ipb, images=imgs, images_per_s=res["images_per_s"])
                rows.setdefault((masks, label), []).append(row)
                print(r, masks, label, json.dumps(row), flush=True)
finally:
    srv.stop()
print("\nmasks compression bytes/image server_cpu_ms/image client_cpu_ms/image (median of rounds)")
out = {}
for (masks, label), rs in rows.items():
    m = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
    out[f"{masks}/{label}"] = m
    print(f"{masks:9} {label:5} {m['bytes_per_image']:12.0f} {m['server_cpu_ms_per_image']:8.2f} {m['client_cpu_ms_per_image']:8.2f}")
print(json.dumps(out, indent=1))
