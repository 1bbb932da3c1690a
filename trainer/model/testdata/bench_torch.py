#!/usr/bin/python3
"""PyTorch baseline for the training benchmarks (BenchmarkTrainStep in
trainer/model, BenchmarkTrainIteration in trainer/train, and on a GPU
BenchmarkTrainStepOnGPU in trainer/tensor/cuda): one train-mode forward
and backward (gradient 1 on every output) of a YOLO26-seg variant, and
optionally one MuSGD-style optimiser step.

  python3 bench_torch.py VARIANT BATCH IMGSZ THREADS ITERS [optstep] [full] [cuda [tf32] [amp] [cl]]

Prints {"sec_per_iter": ..., "opt_step_sec": ...} (best of ITERS after one
warm-up; opt_step_sec is 0 without "optstep"). With "cuda" the model and
input live on GPU 0, each timed step ends with torch.cuda.synchronize(),
and cuDNN picks its algorithms by benchmarking (PyTorch at its best);
TF32 is off for cuBLAS and cuDNN unless "tf32" is given, as in segpipe.
"amp" runs the forward under torch.autocast (float16) with the loss
scaled and the gradients unscaled as GradScaler does, as Ultralytics trains; "cl" puts the model and input in channels_last.
"full" times forward, backward and the optimiser step as one iteration
("full_sec_per_iter"); its loss is the sum of every output (the gradient
of 1 the other timings use), not YOLO26-seg's loss, which has no PyTorch
implementation here.
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
    flags = set(sys.argv[6:])
    device = "cuda" if "cuda" in flags else "cpu"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if device == "cuda":
        tf32 = "tf32" in flags
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
    model = G.Model(*G.SCALES[variant], 80).train().to(device)
    x = torch.rand(batch, 3, imgsz, imgsz, device=device)
    if "cl" in flags:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    amp = "amp" in flags and device == "cuda"
    loss_scale = 65536.0  # a fixed scale: GradScaler's cost without its optimizer bookkeeping

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def forward_backward():
        model.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.float16, enabled=amp):
            o = model(x)
            outs = [o["proto"], o["semseg"], *o["one2many"], *o["one2one"]]
        if amp:
            (loss_scale * sum(t.float().sum() for t in outs)).backward()
        else:
            torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])

    def step():
        forward_backward()
        sync()

    step()
    best = float("inf")
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    opt = 0.0
    if "optstep" in flags:
        bufs = {p: torch.zeros_like(p) for p in model.parameters()}
        opt_step(model, bufs)  # warm-up
        opt = float("inf")
        for _ in range(iters):
            t0 = time.perf_counter()
            opt_step(model, bufs)
            sync()
            opt = min(opt, time.perf_counter() - t0)
    full = 0.0
    if "full" in flags:
        bufs = {p: torch.zeros_like(p) for p in model.parameters()}

        def iteration():
            forward_backward()
            if amp:  # unscale, as GradScaler does before the step
                torch._foreach_mul_([p.grad for p in model.parameters() if p.grad is not None], 1.0 / loss_scale)
            opt_step(model, bufs)
            sync()

        iteration()  # warm-up
        full = float("inf")
        for _ in range(iters):
            t0 = time.perf_counter()
            iteration()
            full = min(full, time.perf_counter() - t0)
    print(json.dumps({"sec_per_iter": best, "opt_step_sec": opt, "full_sec_per_iter": full,
                      "flags": sorted(flags), "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}))


def newton_schulz5(g):
    """The Muon orthogonalisation (5 quintic iterations, float32)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (g.norm() + 1e-7)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    for _ in range(5):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x.T if tall else x


@torch.no_grad()
def opt_step(model, bufs, lr=1e-3, momentum=0.9):
    """MuSGD's cost: Nesterov momentum SGD on every parameter plus
    Newton-Schulz on the flattened weights with ndim >= 2."""
    for p in model.parameters():
        g = p.grad
        buf = bufs[p]
        buf.mul_(momentum).add_(g)
        upd = g.add(buf, alpha=momentum)
        if p.ndim >= 2:
            o = newton_schulz5(upd.reshape(upd.size(0), -1))
            p.add_(o.reshape(p.shape), alpha=-lr * 0.5)
        p.add_(upd, alpha=-lr)


if __name__ == "__main__":
    main()
