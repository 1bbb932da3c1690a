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
tests/bench_windowed.py.) On a GPU that scatter is the right shape:
expand_windows_torch expands on the device the data is on, so a CUDA
consumer uploads w*h bytes an instance instead of Hp*Wp.
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
    w, d = _checked(windows, data, hp, wp)
    n, cells = w.shape[0], hp * wp
    fresh = out is None
    if fresh:
        out = np.zeros(n * cells, dtype=np.uint8)
    elif out.dtype != np.uint8 or out.size != n * cells:
        raise WindowError(f"out has {out.size} elements of {out.dtype}, {n} masks of {hp}x{wp} need {n * cells} uint8")
    flat = out.reshape(-1)
    if n == 0:
        return flat.reshape(0, hp, wp)
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


def _checked(windows, data, hp: int, wp: int) -> tuple[np.ndarray, np.ndarray]:
    """windows as an int32 (sum_N, 4) array and data as 1-D uint8, after
    raster.Expand's checks: every window inside the grid, and the windows'
    sizes adding up to the data's length."""
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
    if w.shape[0] == 0:
        if d.size:
            raise WindowError(f"no windows but {d.size} bytes of mask data")
        return w, d
    w64 = w.astype(np.int64)
    x0, y0, w_, h_ = w64[:, 0], w64[:, 1], w64[:, 2], w64[:, 3]
    bad = (w_ < 0) | (h_ < 0) | (x0 < 0) | (y0 < 0) | (x0 + w_ > wp) | (y0 + h_ > hp)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise WindowError(f"window {i} {tuple(int(v) for v in w[i])} outside grid {hp}x{wp}")
    total = int((w_ * h_).sum())
    if total != d.size:
        raise WindowError(f"windows use {total} bytes, data has {d.size}")
    return w, d


def check_windows(windows, data_size: int, hp: int, wp: int) -> None:
    """Raise WindowError unless windows (int32, (sum_N, 4) or (4*sum_N,))
    describe data_size bytes of masks on the hp x wp grid: the checks of
    expand_windows, on the host, for a consumer that expands on a device
    (expand_windows_torch with checked=True)."""
    _checked(windows, np.empty(data_size, dtype=np.uint8), hp, wp)


def expand_windows_torch(windows, data, hp: int, wp: int, *, checked: bool = False):
    """expand_windows with torch, on data's device: the dense uint8 stack
    (sum_N, hp, wp), built there from the windowed bytes (w*h per instance
    rather than hp*wp travel to the device).

    windows: int32 (sum_N, 4) or (4*sum_N,) tensor or array; data: 1-D
    uint8 tensor of all windows' bytes back to back (for instance the
    windowed batch's mask data after ``.to("cuda", non_blocking=True)``).
    One scatter over every window byte's destination, no Python step per
    instance: on a GPU that is a few kernels whatever the instance count.
    (On the CPU expand_windows' block copies measured faster.)

    The windows are checked on the host first (they are a few bytes per
    instance; windows on a device are copied back for it, a wait for the
    device); checked=True skips that for windows already passed through
    check_windows. Unchecked windows that lie outside the grid would
    write outside their plane.
    """
    import torch

    if not isinstance(data, torch.Tensor):
        data = torch.as_tensor(np.asarray(data))
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise WindowError(f"mask data of dtype {data.dtype} and shape {tuple(data.shape)}, want 1-D uint8")
    dev = data.device
    if not checked:
        host = windows.cpu().numpy() if isinstance(windows, torch.Tensor) else np.asarray(windows)
        check_windows(host, data.numel(), hp, wp)
    w = windows if isinstance(windows, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(windows))
    w = w.to(device=dev, dtype=torch.int64, non_blocking=True).reshape(-1, 4)
    n, cells = w.shape[0], hp * wp
    out = torch.zeros(n * cells, dtype=torch.uint8, device=dev)
    total = data.numel()
    if n and total:
        x0, y0, ww, hh = w.unbind(1)
        sizes = ww * hh
        inst = torch.repeat_interleave(torch.arange(n, device=dev), sizes, output_size=total)
        first = torch.cumsum(sizes, 0) - sizes  # each window's first byte in data
        j = torch.arange(total, device=dev) - first[inst]
        wi = ww[inst]
        row = torch.div(j, wi, rounding_mode="floor")
        dst = inst * cells + (y0[inst] + row) * wp + x0[inst] + (j - row * wi)
        out[dst] = data
    return out.reshape(n, hp, wp)

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
