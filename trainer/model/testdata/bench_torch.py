#!/usr/bin/python3
"""PyTorch CPU baseline for BenchmarkTrainStep: one train-mode forward and
backward (gradient 1 on every output) of a YOLO26-seg variant.

  /usr/bin/python3 bench_torch.py VARIANT BATCH IMGSZ THREADS ITERS

Prints {"sec_per_iter": ...} (best of ITERS after one warm-up).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import gen_goldens as G  # noqa: E402


def main():
    variant, batch, imgsz, threads, iters = sys.argv[1], *map(int, sys.argv[2:6])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = G.Model(*G.SCALES[variant], 80).train()
    x = torch.rand(batch, 3, imgsz, imgsz)

    def step():
        model.zero_grad(set_to_none=True)
        o = model(x)
        outs = [o["proto"], o["semseg"], *o["one2many"], *o["one2one"]]
        torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])

    step()
    best = float("inf")
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"sec_per_iter": best, "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
