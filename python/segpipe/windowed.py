"""Windowed masks back into the dense (sum_N, Hp, Wp) stack, with numpy.

With ``"masks": "windowed"`` the server sends, per instance, its tight window
(x0, y0, w, h) on the Hp x Wp grid and the window's w*h bytes, row-major,
instances back to back (pipeline/remote/windowed.go); an instance with no ON
cell has the window (0, 0, 0, 0) and no bytes. This is raster.Expand, the
function the Go client's expander calls: the checks are vectorised over all
windows, then each instance's bytes land with one 2-D block copy, so Python
runs one step per instance and none per row or pixel. (A single scatter over
per-byte destination indices, fully vectorised, measured 13x to 56x slower on
mosaic batches: its index arithmetic costs more than the copies; see
tests/bench_windowed.py.)
"""

from __future__ import annotations

import numpy as np


class WindowError(ValueError):
    """Windows or data that do not describe a mask stack of the grid."""


def expand_windows(windows, data, hp: int, wp: int, out=None) -> np.ndarray:
    """Return the dense uint8 stack (len(windows), hp, wp) of windowed masks.

    windows: int32 array (sum_N, 4) or (4*sum_N,) of x0, y0, w, h per instance.
    data: uint8 array of all windows' bytes back to back.
    out: optional uint8 array of sum_N*hp*wp elements to fill (reused across
    batches); it is cleared first. Everything is checked before out is
    touched, as raster.Expand does.
    """
    if hp <= 0 or wp <= 0:
        raise WindowError(f"grid {hp}x{wp}: want positive sides")
    w = np.asarray(windows)
    if w.dtype != np.int32:
        raise WindowError(f"windows have dtype {w.dtype}, want int32")
    if w.ndim == 1:
        if w.size % 4:
            raise WindowError(f"{w.size} window values: not a multiple of 4")
        w = w.reshape(-1, 4)
    if w.ndim != 2 or w.shape[1] != 4:
        raise WindowError(f"windows of shape {w.shape}, want (sum_N, 4)")
    d = np.asarray(data)
    if d.dtype != np.uint8 or d.ndim != 1:
        raise WindowError(f"mask data of dtype {d.dtype} and shape {d.shape}, want 1-D uint8")
    n, cells = w.shape[0], hp * wp
    fresh = out is None
    if fresh:
        out = np.zeros(n * cells, dtype=np.uint8)
    elif out.dtype != np.uint8 or out.size != n * cells:
        raise WindowError(f"out has {out.size} elements of {out.dtype}, {n} masks of {hp}x{wp} need {n * cells} uint8")
    flat = out.reshape(-1)
    if n == 0:
        if d.size:
            raise WindowError(f"no windows but {d.size} bytes of mask data")
        return flat.reshape(0, hp, wp)
    w64 = w.astype(np.int64)
    x0, y0, w_, h_ = w64[:, 0], w64[:, 1], w64[:, 2], w64[:, 3]
    bad = (w_ < 0) | (h_ < 0) | (x0 < 0) | (y0 < 0) | (x0 + w_ > wp) | (y0 + h_ > hp)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise WindowError(f"window {i} {tuple(int(v) for v in w[i])} outside grid {hp}x{wp}")
    total = int((w_ * h_).sum())
    if total != d.size:
        raise WindowError(f"windows use {total} bytes, data has {d.size}")
    if not fresh:
        flat[:] = 0  # a fresh np.zeros stack is clear already (lazily, page by page)
    stack = flat.reshape(n, hp, wp)
    off = 0
    for k, (x, y, ww, hh) in enumerate(w.tolist()):
        size = ww * hh
        if size:
            stack[k, y : y + hh, x : x + ww] = d[off : off + size].reshape(hh, ww)
            off += size
    return stack


def image_bytes(data_offsets, data) -> np.ndarray:
    """The bytes of all images of a mask_data binary column, back to back:
    data[offsets[0]:offsets[n]] after the checks the Go expander makes."""
    o = np.asarray(data_offsets)
    d = np.asarray(data)
    if o.ndim != 1 or o.size == 0:
        raise WindowError(f"mask data offsets of shape {o.shape}: want n+1 values")
    lo, hi = int(o[0]), int(o[-1])
    if lo < 0 or hi < lo or hi > d.size:
        raise WindowError(f"mask data offsets {lo}..{hi} outside {d.size} bytes")
    if (np.diff(o.astype(np.int64)) < 0).any():
        raise WindowError("mask data offsets decrease")
    return d[lo:hi]
