// Package gpucheck holds the whole-system checks of the CUDA backend:
// the model's inference and training iteration, the loss, the optimiser
// and the train loop (dense and windowed batches) run on a cuda Backend
// — on the CPU harness everywhere g++ is, on GPU 0 where there is one —
// against the CPU backend, and the training throughput benchmark. They
// live apart from trainer/tensor/cuda, whose own tests check one kernel
// or one Backend method at a time, because they drive packages the
// tensor backend must not know (trainer/loss, trainer/train, pipeline).
// scripts/gpu-check.sh runs the GPU ones. The package has no code of its
// own.
package gpucheck
