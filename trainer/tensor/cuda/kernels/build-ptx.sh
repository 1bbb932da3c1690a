#!/usr/bin/env bash
# Compiles kernel sources to PTX for compute_80 (Ampere; the driver
# JIT-compiles it for any newer GPU), each beside its source, with this
# folder on the include path (shim.h). Usage, from go generate:
#
#   build-ptx.sh                   every .cu of this folder (trainer/tensor/cuda)
#   build-ptx.sh [FLAG...] FILE.cu...   the named sources, with nvcc FLAGs
#                                  (trainer/loss/losscuda's kernels)
#
# CI reruns every package's go generate and fails when the committed PTX
# differs. NVCC overrides the compiler (the committed PTX comes from
# Debian bookworm's nvidia-cuda-toolkit, nvcc 11.8).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
nvcc="${NVCC:-nvcc}"
flags=()
srcs=()
for a in "$@"; do
  case "$a" in
    -*) flags+=("$a") ;;
    *) srcs+=("$a") ;;
  esac
done
if [[ ${#srcs[@]} -eq 0 ]]; then
  cd "$here"
  srcs=(*.cu)
fi
for src in "${srcs[@]}"; do
  "$nvcc" -ptx -arch=compute_80 -std=c++17 -I "$here" "${flags[@]}" -o "${src%.cu}.ptx" "$src"
done
