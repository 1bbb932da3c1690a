"""Times segpipe.windowed.expand_windows on batches shaped like 640 px
mosaic batches (32 images, 7 or 40 instances each, 160x160 grid) against two
other ways of doing it, in one run: a Python loop per mask row, and one
numpy scatter over per-byte destination indices (no Python loop at all).

    python3 python/tests/bench_windowed.py [--repeat 15]

Every variant writes into a fresh np.zeros stack, whose untouched pages the
kernel supplies as zeros on first read: the GB/s of the dense stack count
bytes a consumer sees, not bytes written.
"""

import argparse
import statistics
import time

import _path  # noqa: F401
import numpy as np

from segpipe.windowed import expand_windows


def batch(rng, images=32, per_image=7, grid=160):
    wins = []
    for _ in range(images * per_image):
        w, h = (int(v) for v in rng.integers(4, 64, size=2))
        x0, y0 = int(rng.integers(0, grid - w)), int(rng.integers(0, grid - h))
        wins.append((x0, y0, w, h))
    wins = np.array(wins, dtype=np.int32)
    data = (rng.random(int((wins[:, 2] * wins[:, 3]).sum())) < 0.6).astype(np.uint8)
    return wins, data, grid


def per_row(wins, data, grid):
    out = np.zeros((len(wins), grid, grid), np.uint8)
    off = 0
    for k, (x0, y0, w, h) in enumerate(wins.tolist()):
        for r in range(h):
            out[k, y0 + r, x0 : x0 + w] = data[off : off + w]
            off += w
    return out


def scatter(wins, data, grid):
    n, cells = len(wins), grid * grid
    out = np.zeros(n * cells, np.uint8)
    w = wins.astype(np.int64)
    sizes = w[:, 2] * w[:, 3]
    nz = sizes > 0
    local = np.arange(data.size, dtype=np.int64) - np.repeat((np.cumsum(sizes) - sizes)[nz], sizes[nz])
    width = np.repeat(w[nz, 2], sizes[nz])
    row = local // width
    base = np.arange(n, dtype=np.int64) * cells + w[:, 1] * grid + w[:, 0]
    out[np.repeat(base[nz], sizes[nz]) + row * grid + (local - row * width)] = data
    return out.reshape(n, grid, grid)


def median_s(fn, repeat):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    a = ap.parse_args()
    print(f"numpy {np.__version__}")
    for per_image in (7, 40):
        wins, data, grid = batch(np.random.default_rng(1), per_image=per_image)
        want = per_row(wins, data, grid)
        dense = len(wins) * grid * grid
        print(f"{len(wins)} masks {grid}x{grid}: {data.size} window bytes, {dense} dense bytes")
        base = None
        for name, fn in (
            ("expand_windows (block per mask)", lambda: expand_windows(wins, data, grid, grid)),
            ("loop per row", lambda: per_row(wins, data, grid)),
            ("scatter per byte", lambda: scatter(wins, data, grid)),
        ):
            if not np.array_equal(fn(), want):
                raise SystemExit(f"{name} differs from the per-row loop")
            t = median_s(fn, a.repeat)
            base = base or t
            print(f"  {name:32s} {t * 1e3:8.2f} ms/batch  {dense / t / 1e9:6.2f} GB/s dense  {t / base:6.1f}x its time")


if __name__ == "__main__":
    main()
