"""Helpers for the Ultralytics tests and the device check: an offline
Ultralytics set-up (its own config folder, no downloads, a record of any
connection leaving the machine), and a few optimiser steps of YOLO26n-seg
on one batch (the loss a model trained through the adapter reports)."""

from __future__ import annotations

import atexit
import math
import os
import shutil
import sys
import tempfile

_NET: list = []
_HOOKED = False


def offline_ultralytics() -> str | None:
    """Prepare Ultralytics for a test process; returns its config folder, or
    None where Ultralytics does not import (the tests then skip).

    Call it before anything imports ultralytics: YOLO_CONFIG_DIR becomes a
    temporary folder of this process (the user's settings are never touched)
    and YOLO_OFFLINE=true. A font matplotlib ships (DejaVu Sans) is placed in
    that folder as Arial.ttf and Arial.Unicode.ttf, the files Ultralytics'
    plots look for and would otherwise try to download; only there, so a
    process that imported ultralytics earlier with another folder gets none.
    Connections to hosts off this machine are recorded from then on
    (network_attempts). YOLO_VERBOSE defaults to false (the training log
    would drown the test output)."""
    global _HOOKED
    if "ultralytics" not in sys.modules:
        d = os.environ.get("SEGPIPE_TEST_YOLO_DIR", "")
        if not os.path.isdir(d):
            d = tempfile.mkdtemp(prefix="segpipe-yolo-")
            atexit.register(shutil.rmtree, d, True)
            os.environ["SEGPIPE_TEST_YOLO_DIR"] = d
        os.environ["YOLO_CONFIG_DIR"] = d
    os.environ["YOLO_OFFLINE"] = "true"
    os.environ.setdefault("YOLO_VERBOSE", "false")
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True
    try:
        import matplotlib
        from ultralytics.utils import USER_CONFIG_DIR
    except ImportError:
        return None
    ours = os.environ.get("SEGPIPE_TEST_YOLO_DIR", "")
    if ours and os.path.realpath(str(USER_CONFIG_DIR)).startswith(os.path.realpath(ours) + os.sep):
        font = os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf", "DejaVuSans.ttf")
        for name in ("Arial.ttf", "Arial.Unicode.ttf"):
            dst = os.path.join(str(USER_CONFIG_DIR), name)
            if not os.path.exists(dst):
                shutil.copyfile(font, dst)
    return str(USER_CONFIG_DIR)


def _local(host) -> bool:
    h = host.decode() if isinstance(host, bytes) else str(host)
    return h in ("localhost", "::1", "") or h.startswith("127.") or h.startswith("::ffff:127.")


def _audit(event: str, args: tuple) -> None:
    if event == "socket.connect":
        addr = args[1]
        if isinstance(addr, tuple) and not _local(addr[0]):
            _NET.append(f"connect {addr[0]}:{addr[1]}")
    elif event == "socket.getaddrinfo":
        if args[0] is not None and not _local(args[0]):
            _NET.append(f"resolve {args[0]}")


def network_attempts() -> list:
    """Names or connections of hosts off this machine that this process tried
    to reach (from Python's sockets; gRPC's own are loopback here) since
    offline_ultralytics() was first called."""
    return list(_NET)


def yolo26n_seg(nc: int, device: str = "cpu"):
    """Ultralytics' yolo26n-seg.yaml model (built from the YAML, no weights)
    with the loss settings the adapter implies (overlap_mask=False), seeded."""
    import torch
    from ultralytics.cfg import get_cfg
    from ultralytics.nn.tasks import SegmentationModel

    torch.manual_seed(0)
    m = SegmentationModel("yolo26n-seg.yaml", nc=nc, verbose=False).to(device)
    m.args = get_cfg(overrides={"overlap_mask": False, "epochs": 10})
    return m


def overfit_losses(model, batch: dict, steps: int, lr: float = 2e-3) -> list:
    """Total loss before each of `steps` AdamW steps on the same Ultralytics
    batch (img already scaled to [0, 1]); stops with AssertionError at the
    first loss that is not finite."""
    import torch

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss, items = model(batch)  # items: a tensor (8.4.2) or a dict by loss name (later 8.4)
        if len(items) != 5:  # box, seg, cls, dfl or l1, sem
            raise AssertionError(f"{len(items)} loss items, want 5 (a segmentation model with a semantic head)")
        total = loss.sum()
        losses.append(total.item())
        if not math.isfinite(losses[-1]):
            raise AssertionError(f"loss {losses[-1]} at step {len(losses) - 1}: {losses}")
        opt.zero_grad()
        total.backward()
        opt.step()
    return losses
