"""Rank and world size of this process, as a stream request needs them.

Pure Python: torch.distributed is consulted when it is importable, and a test
passes its own stand-in.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from .request import RequestError


def _torch_distributed() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist


def rank_and_world(
    rank: int | None = None,
    world_size: int | None = None,
    *,
    dist: Any = "torch",
    environ: Mapping[str, str] | None = None,
) -> tuple[int, int]:
    """Resolve (rank, world_size) for one stream.

    Explicit values win. Otherwise: torch.distributed's rank and world size
    when its process group is initialised; else the RANK and WORLD_SIZE
    variables that torchrun (and Ultralytics' DDP launcher) set before the
    group exists; else rank 0 of 1. Every rank of a run must resolve the same
    world size, or the ranks' streams overlap.

    dist is a torch.distributed-like module (is_available, is_initialized,
    get_rank, get_world_size), None for none, or "torch" to import it.
    """
    if dist == "torch":
        dist = _torch_distributed()
    env = os.environ if environ is None else environ
    d_rank = d_world = None
    if dist is not None and dist.is_available() and dist.is_initialized():
        d_rank, d_world = int(dist.get_rank()), int(dist.get_world_size())
        source = "torch.distributed"
    elif "WORLD_SIZE" in env or "RANK" in env:
        if "WORLD_SIZE" not in env or "RANK" not in env:
            raise RequestError("RANK and WORLD_SIZE must be set together (torchrun sets both)")
        try:
            d_rank, d_world = int(env["RANK"]), int(env["WORLD_SIZE"])
        except ValueError:
            raise RequestError(f"RANK={env['RANK']!r} WORLD_SIZE={env['WORLD_SIZE']!r}: want integers") from None
        source = "RANK/WORLD_SIZE"
    else:
        d_rank, d_world, source = 0, 1, "default"
    r = d_rank if rank is None else rank
    w = d_world if world_size is None else world_size
    for name, v in (("rank", r), ("world_size", w)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise RequestError(f"{name} {v!r}: want an integer")
    if w < 1 or not 0 <= r < w:
        raise RequestError(f"rank {r} of world_size {w} (from {source} and the arguments): want 0 <= rank < world_size")
    return r, w
