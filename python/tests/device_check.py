"""The Python consumer on a machine with pyarrow and torch (the GPU host):
FlightBatches against `segpipe dump`, resume, throughput, and a few
YOLO26n-seg steps through the Ultralytics adapter.

Run by python/device_check.sh, which converts a synthetic dataset and starts
`segpipe serve` on loopback. Every check is recorded in one JSON report; the
exit status is 1 when any check failed or could not run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _path  # noqa: E402,F401

T0 = time.monotonic()
REPORT: dict = {"checks": {}, "figures": {}, "notes": []}
KEYS: tuple = ()  # segpipe.flight.TENSOR_KEYS once pyarrow is known to import

def elapsed() -> float:
    return time.monotonic() - T0


def check(name: str):
    """Decorator: run a check, record ok/failed with its detail and time."""

    def wrap(fn):
        def run(*a, **kw):
            t = time.monotonic()
            try:
                detail = fn(*a, **kw)
                REPORT["checks"][name] = {"ok": True, "detail": detail, "seconds": round(time.monotonic() - t, 2)}
                print(f"ok      {name}: {detail}", flush=True)
                return True
            except Exception as e:  # a failed check is reported, the others still run
                REPORT["checks"][name] = {
                    "ok": False,
                    "error": f"{type(e).__name__}: {e}",
                    "trace": traceback.format_exc(limit=6),
                    "seconds": round(time.monotonic() - t, 2),
                }
                print(f"FAILED  {name}: {type(e).__name__}: {e}", flush=True)
                return False

        return run

    return wrap


def dump(a, n: int, batch: int, imgsz: int, seed: int, path: str) -> tuple[float, int, dict]:
    """segpipe dump of the first n batches; returns (seconds, file bytes, summary)."""
    summary = path + ".json"
    cmd = [a.binary, "dump", "--shards", a.shards, "--batches", str(n), "--batch", str(batch), "--imgsz", str(imgsz)]
    cmd += ["--seed", str(seed), "--out", path, "--summary", summary]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    secs = time.monotonic() - t
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    with open(summary) as f:
        return secs, os.path.getsize(path), json.load(f)


def read_dump(path: str, imgsz: int) -> list[dict]:
    """The dump's batches through the package's zero-copy views, each view
    checked against pyarrow's own (copying) conversion of the same column."""
    import numpy as np
    import pyarrow as pa

    from segpipe.flight import record_arrays

    out = []
    with pa.ipc.open_stream(path) as r:
        for i, rb in enumerate(r):
            v = record_arrays(rb, False, imgsz)
            n = rb.num_rows
            plain = {
                "image_id": np.array(rb.column("image_id").to_pylist(), np.int64),
                "transform": np.array(rb.column("transform").to_pylist(), np.float64).reshape(n, 6),
                "boxes": np.array(sum(rb.column("boxes").to_pylist(), []), np.float32).reshape(-1, 4),
                "classes": np.array(sum(rb.column("classes").to_pylist(), []), np.int32),
                "iscrowd": np.array(sum(rb.column("iscrowd").to_pylist(), []), np.uint8),
                "boxes_per_image": np.array(rb.column("boxes_per_image").to_pylist(), np.int32),
            }
            img = rb.column("image")
            if hasattr(img, "to_numpy_ndarray"):  # pyarrow knows the tensor extension type
                plain["images"] = img.to_numpy_ndarray()
                masks = rb.column("masks").flatten()
                if len(masks):
                    plain["masks"] = masks.to_numpy_ndarray()
            for k, want in plain.items():
                if v[k].shape != want.shape or v[k].tobytes() != want.tobytes():
                    raise AssertionError(f"dump batch {i}: the zero-copy view of {k} differs from pyarrow's conversion")
            out.append(v)
    return out


def same(batch: dict, ref: dict, where: str) -> None:
    for k in KEYS:
        got = batch[k].cpu().numpy()
        want = ref[k]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise AssertionError(f"{where}: {k} is {got.dtype}{got.shape}, dump has {want.dtype}{want.shape}")
        if got.tobytes() != want.tobytes():
            raise AssertionError(f"{where}: {k} differs from the dump")


def against_summary(refs: list[dict], summary: dict) -> None:
    """The dump as pyarrow reads it against the counts Go wrote beside it."""
    if len(refs) != len(summary["batches"]):
        raise AssertionError(f"dump holds {len(refs)} batches, its summary {len(summary['batches'])}")
    for i, (r, s) in enumerate(zip(refs, summary["batches"])):
        if r["images"].shape[0] != s["rows"] or r["masks"].shape[0] != s["instances"]:
            raise AssertionError(f"batch {i}: rows/instances differ from the Go summary")
        if r["boxes_per_image"].tolist() != s["boxes_per_image"]:
            raise AssertionError(f"batch {i}: boxes_per_image differ from the Go summary")
        if int(r["masks"].sum(dtype="int64")) != s["mask_ones"]:
            raise AssertionError(f"batch {i}: {int(r['masks'].sum())} ON mask cells, Go counted {s['mask_ones']}")
    p = summary.get("probe")
    if p and refs[p["batch"]]["masks"][p["instance"], p["row"], p["col"]] != p["value"]:
        raise AssertionError(f"mask probe {p} does not match")


def take(fb, n: int):
    """The first n batches of a FlightBatches, over as many epoch passes as
    they span (each iteration is one epoch)."""
    k = 0
    while k < n:
        before = k
        for b in fb:
            yield b
            k += 1
            if k == n:
                return
        if k == before:
            return


def stream(a, **kw):
    from segpipe import FlightBatches

    return FlightBatches(a.addr, a.set, rank=0, world_size=1, **kw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--shards", required=True, help="the converted shard set (for segpipe dump)")
    ap.add_argument("--set", required=True, help="its name below the server's root")
    ap.add_argument("--addr", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--ultralytics", required=True, help="folder holding the ultralytics package")
    ap.add_argument("--budget", type=float, default=80.0, help="seconds; later checks are skipped past it")
    a = ap.parse_args()
    REPORT["python"] = sys.version.split()[0]
    REPORT["machine"] = platform.node()

    @check("imports")
    def imports():
        import numpy
        import pyarrow
        import pyarrow.flight  # noqa: F401
        import torch

        REPORT["versions"] = {"numpy": numpy.__version__, "pyarrow": pyarrow.__version__, "torch": torch.__version__}
        REPORT["cuda"] = torch.cuda.is_available() and torch.cuda.get_device_name(0)
        return REPORT["versions"] | {"cuda": REPORT["cuda"]}

    if not imports():
        return finish(a)

    import numpy as np
    import torch

    from segpipe.flight import TENSOR_KEYS

    global KEYS
    KEYS = TENSOR_KEYS  # every tensor of a batch is compared byte for byte with the dump

    N, B, S, SEED = 12, 8, 320, 3  # 12 batches of 8 from 64 images: crosses an epoch end
    ref_path = os.path.join(a.work, "ref.arrows")
    refs: list[dict] = []

    @check("dump reference")
    def reference():
        secs, size, summary = dump(a, N, B, S, SEED, ref_path)
        refs.extend(read_dump(ref_path, S))
        against_summary(refs, summary)
        return (
            f"{len(refs)} batches, {sum(r['masks'].shape[0] for r in refs)} instances; the zero-copy views equal "
            "pyarrow's own conversion and the counts Go wrote beside the dump"
        )

    have_ref = reference()
    common = dict(batch_size=B, imgsz=S, start={"seed": SEED})

    for masks in ("dense", "windowed"):

        @check(f"byte-identical to segpipe dump ({masks} masks)")
        def identical(masks=masks):
            if not have_ref:
                raise RuntimeError("no dump reference")
            with stream(a, masks=masks, **common) as fb:
                got = list(take(fb, N))
                if len(got) != N:
                    raise AssertionError(f"{len(got)} batches, want {N}")
                for i, (b, r) in enumerate(zip(got, refs)):
                    same(b, r, f"batch {i}")
                last = fb.state()
            return f"{N} batches equal in {', '.join(KEYS)}; state after: {last.to_json()}"

        identical()

    @check("resume from state() mid-stream")
    def resume():
        if not have_ref:
            raise RuntimeError("no dump reference")
        k = N // 2
        with stream(a, masks="windowed", **common) as fb:
            for i, b in enumerate(fb):
                if i == k:
                    break
            st = fb.state()
        rest = dict(common, start=st)
        with stream(a, masks="windowed", **rest) as fb:
            got = list(take(fb, N - k - 1))
        if len(got) != N - k - 1:
            raise AssertionError(f"{len(got)} batches after resuming, want {N - k - 1}")
        for j, b in enumerate(got):
            same(b, refs[k + 1 + j], f"resumed batch {j} (batch {k + 1 + j})")
        return f"stopped after batch {k} at {st.to_json()}, the {len(got)} batches that followed equal the dump's"

    resume()

    if torch.cuda.is_available():

        @check("pinned, non-blocking copies to CUDA")
        def to_cuda():
            if not have_ref:
                raise RuntimeError("no dump reference")
            with stream(a, masks="windowed", device="cuda", pin_memory=True, **dict(common, limit=3)) as fb:
                got = list(take(fb, 3))
            torch.cuda.synchronize()
            for i, b in enumerate(got):
                if b["images"].device.type != "cuda":
                    raise AssertionError(f"batch {i} is on {b['images'].device}")
                same(b, refs[i], f"batch {i} on cuda")
            return f"{len(got)} batches on {got[0]['images'].device}, equal to the dump"

        to_cuda()

        @check("windowed masks expanded on the device: host CPU per batch")
        def expand_on_device():
            # The same windowed stream twice, to CUDA: expanded there (the
            # default for a CUDA device) and on the host (EXPAND_ON empty),
            # each batch's masks compared; the host CPU each way.
            out, masks = {}, {}
            for where, on in (("device", ("cuda",)), ("host", ())):
                with stream(a, masks="windowed", device="cuda", pin_memory=True, **dict(common, limit=N)) as fb:
                    fb.EXPAND_ON = on
                    it = take(fb, N)
                    first = next(it)  # connection and the loader's first batch
                    c0 = time.process_time()
                    got = [first] + list(it)
                    torch.cuda.synchronize()
                    out[where] = round((time.process_time() - c0) * 1e3 / max(len(got) - 1, 1), 3)
                    masks[where] = [b["masks"].cpu() for b in got]
            for i, (d, h) in enumerate(zip(masks["device"], masks["host"])):
                if not torch.equal(d, h):
                    raise AssertionError(f"batch {i}: masks expanded on the device differ from the host's")
            REPORT["figures"]["windowed_expand_host_cpu_ms_per_batch"] = out
            return f"host CPU ms per batch (prefetch thread included): device {out['device']}, host {out['host']}; masks equal"

        expand_on_device()
    else:
        REPORT["checks"]["pinned, non-blocking copies to CUDA"] = {"ok": False, "error": "torch.cuda.is_available() is False"}

    # -- throughput: the Python consumer and the Go side in this one run -----
    M, TB, TS = 24, 16, 640

    def nbytes(b: dict) -> int:
        return sum(b[k].numel() * b[k].element_size() for k in KEYS)

    @check("throughput")
    def throughput():
        fig = REPORT["figures"]
        secs, size, _ = dump(a, M, TB, TS, SEED, os.path.join(a.work, "bench.arrows"))
        fig["go_segpipe_dump"] = {
            "batches_per_s": round(M / secs, 2),
            "GB_per_s": round(size / secs / 1e9, 3),
            "what": "segpipe dump: the Go loader in-process writing Arrow IPC to a file (no Flight); "
            "there is no Go CLI command that only consumes a Flight stream",
        }
        t = time.monotonic()
        with open(os.path.join(a.work, "bench.arrows"), "rb") as f:
            import pyarrow as pa

            from segpipe.flight import record_arrays, to_tensors

            total = 0
            for rb in pa.ipc.open_stream(f):
                total += nbytes(to_tensors(record_arrays(rb, False, TS)))
        secs = time.monotonic() - t
        fig["python_tensors_from_ipc_file"] = {
            "batches_per_s": round(M / secs, 1),
            "GB_per_s": round(total / secs / 1e9, 3),
            "what": "the same batches read from the dump file into tensors: the consumer's own ceiling",
        }
        for masks in ("dense", "windowed"):
            with stream(a, masks=masks, batch_size=TB, imgsz=TS, start={"seed": SEED}) as fb:
                t_open = time.monotonic()
                it = take(fb, M)
                next(it)  # connection and the loader's first batch
                first_secs = time.monotonic() - t_open
                wire0 = fb.bytes_received
                t = time.monotonic()
                total, n = 0, 0
                for b in it:
                    total += nbytes(b)
                    n += 1
                secs = time.monotonic() - t
                fig[f"python_flightbatches_{masks}"] = {
                    "batches_per_s": round(n / secs, 2),
                    "GB_per_s": round(total / secs / 1e9, 3),
                    "arrow_GB_per_s": round((fb.bytes_received - wire0) / secs / 1e9, 3),
                    "batches_per_s_with_first": round((n + 1) / (secs + first_secs), 2),
                    "what": f"FlightBatches over loopback, {masks} masks on the wire, tensors on the host; "
                    "the first batch (connection, loader start) is not timed",
                }
        go = fig["go_segpipe_dump"]["batches_per_s"]  # process start and first batch included
        for k in ("python_flightbatches_dense", "python_flightbatches_windowed"):
            fig[k]["vs_go_segpipe_dump"] = round(fig[k]["batches_per_s_with_first"] / go, 3)
        return {k: v["batches_per_s"] for k, v in fig.items()}

    throughput()

    # -- Ultralytics ----------------------------------------------------------
    @check("Ultralytics YOLO26n-seg on an overfit batch through the adapter")
    def ultralytics_steps():
        try:  # installed from PyPI where the host has it; else the carried source
            import ultralytics as ul

            placeholders, src = [], os.path.dirname(ul.__file__)
        except ImportError:
            import vendored_ultralytics

            ul, placeholders = vendored_ultralytics.import_ultralytics(a.ultralytics)
            src = a.ultralytics
        REPORT["ultralytics"] = {"version": ul.__version__, "placeholders": placeholders, "src": src}
        from overfit import overfit_losses, yolo26n_seg

        from segpipe.ultralytics import ULTRALYTICS_VERSION, check_version, ultralytics_batch

        warn = check_version()
        if warn:
            REPORT["notes"].append(warn)
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        with stream(a, masks="windowed", batch_size=B, imgsz=S, start={"seed": SEED}, limit=1, device=dev, pin_memory=dev == "cuda") as fb:
            info = fb.dataset_info()
            raw = next(iter(fb))
        nc = len(info["categories"])
        batch = ultralytics_batch(raw)
        batch["img"] = batch["img"].float() / 255
        losses = overfit_losses(yolo26n_seg(nc, dev), batch, 20)
        REPORT["figures"]["yolo26n_seg_overfit_losses"] = [round(x, 4) for x in losses]
        if not (np.mean(losses[-3:]) < np.mean(losses[:3])):
            raise AssertionError(f"loss did not fall: {losses}")
        return f"Ultralytics {ul.__version__} (adapter written against {ULTRALYTICS_VERSION}), {dev}, loss {losses[0]:.3f} -> {losses[-1]:.3f} in 20 steps"

    ultralytics_steps()

    if elapsed() < a.budget - 30:

        @check("model.train(trainer=SegpipeSegmentationTrainer) over Flight, 1 epoch")
        def full_trainer():
            from ultralytics import YOLO

            from segpipe.ultralytics import SegpipeSegmentationTrainer

            model = YOLO("yolo26n-seg.yaml", task="segment")
            model.train(
                trainer=SegpipeSegmentationTrainer,
                data=f"segpipe://{a.addr}/{a.set}",
                epochs=1,
                imgsz=S,
                batch=B,
                device=0 if torch.cuda.is_available() else "cpu",
                workers=0,
                plots=False,
                amp=False,
                project=os.path.join(a.work, "runs"),
                name="train",
                exist_ok=True,
                verbose=False,
            )
            tl = [float(x) for x in model.trainer.tloss]
            if not all(math.isfinite(x) for x in tl):
                raise AssertionError(f"losses {tl}")
            return f"1 epoch, mean losses {[round(x, 3) for x in tl]}"

        full_trainer()
    else:
        REPORT["notes"].append(f"model.train over Flight not run: {elapsed():.0f} s used of the {a.budget:.0f} s budget")

    return finish(a)


def finish(a) -> int:
    REPORT["seconds"] = round(elapsed(), 1)
    failed = [k for k, v in REPORT["checks"].items() if not v["ok"]]
    REPORT["ok"] = not failed
    with open(a.report, "w") as f:
        json.dump(REPORT, f, indent=1)
    print(f"{len(REPORT['checks']) - len(failed)} passed, {len(failed)} failed  ({REPORT['seconds']} s; report {a.report})")
    for k in failed:
        print(f"  failed: {k}: {REPORT['checks'][k]['error']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
