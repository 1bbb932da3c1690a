"""A plain PyTorch training loop over segpipe batches.

    segpipe serve --shards shards --addr 127.0.0.1:8815 &
    PYTHONPATH=python python examples/pytorch_loop.py --addr 127.0.0.1:8815 --shards train2017 \
        --epochs 2 --batch 16 --imgsz 256 --checkpoint /tmp/ckpt.pt

A small fully convolutional net learns each image's foreground (the union of
its instance masks) on the stride-4 mask grid, with binary cross-entropy: the
smallest model that uses the images, the per-image split of the mask stack,
and the loader's epochs and resume state the way a real trainer would. The
checkpoint holds the model, the optimiser and the loader's state_dict();
running again with the same --checkpoint continues exactly where the last run
stopped (--stop-after N ends a run after N steps, to try that).

Under torchrun, each process reads its own rank's batches (the rank comes
from torch.distributed); wrap the model in DistributedDataParallel as usual.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from segpipe import FlightBatches
from segpipe.batch import per_image


class Foreground(nn.Module):
    """Stride-4 foreground logits from RGB: two stride-2 convolutions."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1),
            nn.BatchNorm2d(width),
            nn.SiLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1),
            nn.BatchNorm2d(width),
            nn.SiLU(),
            nn.Conv2d(width, 1, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)[:, 0]


def foreground(batch: dict) -> torch.Tensor:
    """(N, Hp, Wp) float: 1 where any instance of the image covers a cell."""
    n, _, h, w = batch["images"].shape
    out = torch.zeros((n, h // 4, w // 4), dtype=torch.float32)
    for i, m in enumerate(per_image(batch)):
        if len(m):
            out[i] = m.amax(dim=0).float()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--addr", required=True, help="segpipe serve HOST:PORT")
    ap.add_argument("--shards", required=True, help="shard set below the server's root")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--imgsz", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--checkpoint", help="save here after every epoch; resume from it if it exists")
    ap.add_argument("--stop-after", type=int, default=0, help="end after this many steps (0: run every epoch)")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    model = Foreground()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    loader = FlightBatches(
        a.addr, a.shards, batch_size=a.batch, imgsz=a.imgsz, masks="windowed",
        start={"seed": a.seed}, epochs=a.epochs, token=os.environ.get("SEGPIPE_TOKEN"),
    )  # fmt: skip
    if a.checkpoint and os.path.exists(a.checkpoint):
        ck = torch.load(a.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        loader.load_state_dict(ck["loader"])
        print(f"resumed at {ck['loader']}")

    def save() -> None:
        if a.checkpoint:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "loader": loader.state_dict()}, a.checkpoint)

    steps = 0
    while loader.epoch < a.epochs:
        epoch, n, t0, total = loader.epoch, len(loader), time.monotonic(), 0.0
        for b in loader:  # one epoch; the loader moves to the next at its end
            x = b["images"].float().div_(255)
            loss = F.binary_cross_entropy_with_logits(model(x), foreground(b))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item()
            steps += 1
            if a.stop_after and steps == a.stop_after:
                save()  # the loader's state is after this very batch
                print(f"stopped after {steps} steps at {loader.state_dict()}")
                return
        done = b["batch"] + 1 if n else 0
        print(f"epoch {epoch}: {done}/{n} batches, mean loss {total / max(done, 1):.4f}, {time.monotonic() - t0:.1f} s")
        save()


if __name__ == "__main__":
    main()
