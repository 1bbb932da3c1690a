#!/usr/bin/env bash
# Compiles each kernel source to PTX for compute_80 (Ampere; the driver
# JIT-compiles it for any newer GPU). Run by `go generate` in
# trainer/tensor/cuda; CI reruns it and fails when the committed PTX
# differs. NVCC overrides the compiler (the committed PTX comes from
# Debian bookworm's nvidia-cuda-toolkit, nvcc 11.8).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
nvcc="${NVCC:-nvcc}"
for src in *.cu; do
  flags=()
  case "$src" in
    # The loss's kernels round every operation as the Go reference does:
    # no multiply-add contraction.
    loss_assign.cu) flags=(-fmad=false) ;;
  esac
  "$nvcc" -ptx -arch=compute_80 -std=c++17 "${flags[@]}" -o "${src%.cu}.ptx" "$src"
done
