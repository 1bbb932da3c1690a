"""A few optimiser steps of YOLO26n-seg on one batch, for the CPU tests and
the device check: the loss a model trained through the adapter reports."""

import math


def yolo26n_seg(nc: int, device: str = "cpu"):
    """The vendored yolo26n-seg.yaml model with the loss settings the adapter
    implies (overlap_mask=False), seeded."""
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
        loss, items = model(batch)
        if items.shape[0] != 5:  # box, seg, cls, dfl, sem
            raise AssertionError(f"{items.shape[0]} loss items, want 5 (a segmentation model with a semantic head)")
        total = loss.sum()
        losses.append(total.item())
        if not math.isfinite(losses[-1]):
            raise AssertionError(f"loss {losses[-1]} at step {len(losses) - 1}: {losses}")
        opt.zero_grad()
        total.backward()
        opt.step()
    return losses
