#!/usr/bin/env bash
# gpu-check.sh: the checks segpipe runs on a GPU machine, as one report.
#
# Build on a machine with Go, from the repository root, and carry the
# five results (all git-ignored) with the tree:
#
#   CGO_ENABLED=0 go build -o segpipe . &&
#   CGO_ENABLED=0 go test -c -o trainer/tensor/cuda/cuda.test ./trainer/tensor/cuda &&
#   CGO_ENABLED=0 go test -c -o trainer/loss/losscuda/losscuda.test ./trainer/loss/losscuda &&
#   CGO_ENABLED=0 go test -c -o trainer/gpucheck/gpucheck.test ./trainer/gpucheck &&
#   CGO_ENABLED=0 go test -c -o trainer/tensor/tensor.test ./trainer/tensor
#
# The GPU machine may have no Go, so the tests run as those prebuilt test
# binaries. Then, on the GPU machine, from the repository root:
#
#   bash scripts/gpu-check.sh            # report in $OUT/gpu-check/report.txt
#
# It needs no network. SEGPIPE_BENCH_TORCH names the Python whose PyTorch
# is the throughput baseline (default $TORCH_VENV/bin/python), and
# GPU_CHECK_TRAIN_IMAGES the size of the short training run's data (256).
# The CUDA libraries are found in the nvidia/*/lib
# folders of /opt/torch/.venv (PyTorch's CUDA 13 wheels) unless
# TORCH_VENV says otherwise. Every step has its own timeout, and a failed
# step does not stop the others; the whole run stays under 5 minutes
# (GPU_CHECK_BUDGET seconds, 290 by default: later steps get what is left).
# The exit status is 1 when any step that exists failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

outroot="${OUT:-$PWD/gpu-check-out}"
out="$outroot/gpu-check"
mkdir -p "$out"
report="$out/report.txt"
: >"$report"
venv="${TORCH_VENV:-/opt/torch/.venv}"
start=$SECONDS
failed=0

say() { printf '%s\n' "$*" | tee -a "$report"; }

# The whole run must end within budget seconds: a step's timeout is cut
# to what is left (minus the kill grace), and a step that would get less
# than 10 s is not started.
budget="${GPU_CHECK_BUDGET:-290}"

# step NAME TIMEOUT_SECONDS COMMAND...: runs the command with its own
# timeout, keeps its whole output in $out/NAME.log and its tail in the
# report.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((budget - (SECONDS - start) - 5))
  if ((left < 10)); then
    say ""
    say "==== $name ===="
    say "---- $name: NOT RUN: the ${budget}s budget is spent"
    failed=1
    return
  fi
  ((limit > left)) && limit=$left
  say ""
  say "==== $name (timeout ${limit}s) ===="
  say "\$ $*"
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 60 "$out/$name.log" | tee -a "$report"
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    say "---- $name: TIMED OUT after ${limit}s"
    failed=1
  elif [[ $rc -ne 0 ]]; then
    say "---- $name: FAILED (exit $rc) in $((SECONDS - t0))s; full output in $name.log"
    failed=1
  else
    say "---- $name: ok in $((SECONDS - t0))s"
  fi
}

not_yet() {
  say ""
  say "==== $1 ===="
  say "---- NOT YET AVAILABLE: $2"
}

say "segpipe gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
say "repository: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

# The pip wheels' folders go on LD_LIBRARY_PATH too, for the libraries
# cuDNN and cuBLAS open by soname themselves (NVRTC, cuBLASLt).
libdirs="$(ls -d "$venv"/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | paste -sd: -)"
if [[ -n "$libdirs" ]]; then
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "LD_LIBRARY_PATH += the nvidia/*/lib folders of $venv"
else
  say "no nvidia/*/lib folders under $venv: relying on the system's CUDA libraries"
fi
export VIRTUAL_ENV="${VIRTUAL_ENV:-$venv}"

if command -v nvidia-smi >/dev/null 2>&1; then
  step nvidia-smi 15 nvidia-smi
fi

if [[ -x ./segpipe ]]; then
  step segpipe-device 15 ./segpipe device
else
  say ""
  say "==== segpipe-device ===="
  say "---- FAILED: ./segpipe is missing (see the build command at the top of this script)"
  failed=1
fi

# The CUDA tests: every kernel against the CPU reference, cuBLAS GEMMs
# (fp32 and TF32), cuDNN convolutions and batch-norm, pinned copies and
# events, and the optimiser device twins (TestOptimOnGPU: SGD, AdamW and
# MuSGD steps, clipping, EMA against the cpu backend, nothing crossing),
# and the loss result's copy behind the queued work (TestFetchOnGPU)
# (trainer/tensor/cuda); the loss's device kernels and ForwardOn against
# Forward (trainer/loss/losscuda); inference and checkpoints across the
# backends (trainer/gpucheck). -test.v prints each kernel's worst
# relative error.
test_bin=trainer/tensor/cuda/cuda.test
loss_bin=trainer/loss/losscuda/losscuda.test
check_bin=trainer/gpucheck/gpucheck.test
if [[ -x "$test_bin" && -x "$loss_bin" && -x "$check_bin" ]]; then
  step cuda-kernel-tests 60 bash -c "rc=0
    (cd trainer/tensor/cuda && ./cuda.test -test.v -test.count=1 -test.run 'OnGPU|HostBuffer|NoDriver') || rc=1
    (cd trainer/loss/losscuda && ./losscuda.test -test.v -test.count=1 -test.run 'OnGPU') || rc=1
    (cd trainer/gpucheck && ./gpucheck.test -test.v -test.count=1 -test.run 'OnGPU' -test.skip 'TestIterationOnGPU') || rc=1
    exit \$rc"
  if [[ -f "$out/cuda-kernel-tests.log" ]]; then
    say ""
    say "worst relative error per kernel check (TF32 off unless named):"
    grep -E -- '--- (PASS|FAIL|SKIP)|worst relative error|algorithms fwd|no CUDA device' "$out/cuda-kernel-tests.log" | sed 's/^ *//' >>"$report"
    if grep -q -- '--- SKIP: TestKernelsOnGPU' "$out/cuda-kernel-tests.log"; then
      say "---- cuda-kernel-tests: FAILED: the GPU tests skipped (no usable device: see above)"
      failed=1
    fi
  fi
elif command -v go >/dev/null 2>&1; then
  step cuda-kernel-tests 200 go test -count=1 -v -run 'OnGPU|HostBuffer|NoDriver' -skip TestIterationOnGPU ./trainer/tensor/cuda ./trainer/loss/losscuda ./trainer/gpucheck
else
  say ""
  say "==== cuda-kernel-tests ===="
  say "---- FAILED: $test_bin, $loss_bin or $check_bin is missing and there is no Go here (see the build command at the top)"
  failed=1
fi


# skipped NAME LOG TEST: a test that skipped (no usable device) fails the step.
skipped() {
  if [[ -f "$out/$1.log" ]] && grep -q -- "--- SKIP: $3" "$out/$1.log"; then
    say "---- $1: FAILED: $3 skipped (no usable device: see $1.log)"
    failed=1
  fi
}

# The conformance suite of trainer/tensor on the cuda backend against the
# CPU reference, 1e-3 relative with TF32 off; each op's worst case.
tensor_bin=trainer/tensor/tensor.test
if [[ -x "$tensor_bin" ]]; then
  step conformance-cuda 45 bash -c "cd trainer/tensor && ./tensor.test -test.v -test.count=1 -test.run '^TestConformance\$/^cuda\$'"
elif command -v go >/dev/null 2>&1; then
  step conformance-cuda 200 go test -count=1 -v -run '^TestConformance$/^cuda$' ./trainer/tensor
else
  say ""
  say "==== conformance-cuda ===="
  say "---- FAILED: $tensor_bin is missing and there is no Go here (see the build command at the top)"
  failed=1
fi
if [[ -f "$out/conformance-cuda.log" ]]; then
  say ""
  say "worst relative error per op of the conformance suite (cuda vs cpu, TF32 off):"
  grep -E 'worst relative error|--- (PASS|FAIL|SKIP)' "$out/conformance-cuda.log" | sed 's/^ *//' >>"$report"
  skipped conformance-cuda "$out/conformance-cuda.log" 'TestConformance/cuda'
fi

# One training iteration of variant n, batch 2, 256 px, from the golden
# weights: the loss items, every parameter gradient and the batch-norm
# state against the CPU backend at 1e-3.
if [[ -x "$check_bin" ]]; then
  step iteration-vs-cpu 80 bash -c "cd trainer/gpucheck && ./gpucheck.test -test.v -test.count=1 -test.run '^TestIterationOnGPU\$'"
  skipped iteration-vs-cpu "$out/iteration-vs-cpu.log" TestIterationOnGPU
fi

# Throughput of the training step (variant n, 640 px, one train-mode
# forward and backward with gradient 1 on every output, synchronised),
# batch 32 and 16, fp32 and TF32, against PyTorch eager running the
# project's own model script (trainer/model/testdata/bench_torch.py, the
# CPU benchmarks' baseline, with "cuda") on the same GPU in the same run:
# go/torch is segpipe's best step over PyTorch's (below 1: faster).
torch_py="${SEGPIPE_BENCH_TORCH:-$venv/bin/python}"
if [[ -x "$torch_py" ]] && "$torch_py" -c 'import torch' >/dev/null 2>&1; then
  export SEGPIPE_BENCH_TORCH="$torch_py"
  say ""
  say "PyTorch for the throughput baseline: $torch_py"
else
  unset SEGPIPE_BENCH_TORCH
  say ""
  say "no PyTorch at $torch_py: the throughput steps time segpipe only (go/torch NOT MEASURED)"
fi
for b in 32 16; do
  name="throughput-batch$b"
  if [[ -x "$check_bin" ]]; then
    step "$name" 75 bash -c "cd trainer/gpucheck && ./gpucheck.test -test.v -test.run '^\$' -test.bench 'TrainStepOnGPU/^batch=$b\$' -test.benchtime 1x"
  elif command -v go >/dev/null 2>&1; then
    step "$name" 120 go test -v -run '^$' -bench "TrainStepOnGPU/^batch=$b\$" -benchtime 1x ./trainer/gpucheck
  else
    say ""
    say "==== $name ===="
    say "---- FAILED: $check_bin is missing and there is no Go here (see the build command at the top)"
    failed=1
    continue
  fi
  if [[ -f "$out/$name.log" ]]; then
    say "training step, batch $b at 640 px (best-s/step, img/s, host-device-B/step, torch-best-s/step, go/torch):"
    grep -E '^BenchmarkTrainStepOnGPU' "$out/$name.log" | tee -a "$report"
    skipped "$name" "$out/$name.log" 'BenchmarkTrainStepOnGPU'
  fi
done

# segpipe train --device cuda with the loader on this machine's cores:
# batch 32 at 640 px, two epochs of GPU_CHECK_TRAIN_IMAGES synthetic
# images (default 256: 8 iterations an epoch), validated once at the end
# on 16 others. The second epoch is warm (the first plans the
# convolutions): its images_per_s and loader_stall_s in results.csv are
# the figures — loader_stall_s is the time the step waited for the loader
# (the host blocked in Next), an upper bound on the GPU's wait, since the
# step's queued kernels run on meanwhile — and the log's "device traffic
# per iteration" line has the host↔device bytes per step and
# device_wait_ms, the GPU's own idle time between one step and the next
# (timing events around each staged batch's work, the copies included).
if [[ -x ./segpipe ]]; then
  work="$outroot/train-cuda"
  rm -rf "$work"
  images="${GPU_CHECK_TRAIN_IMAGES:-256}"
  step train-data 30 bash -c "./segpipe quickstart --dir '$work/train' --images $images --epochs 0 &&
    ./segpipe quickstart --dir '$work/val' --images 16 --epochs 0"
  step train-cuda 100 ./segpipe train --shards "$work/train/shards" --val-shards "$work/val/shards" --variant n \
    --epochs 2 --val-every 2 --batch 32 --imgsz 640 --device cuda --out "$work/run"
  if [[ -f "$work/run/results.csv" ]]; then
    say "results.csv (epoch 2 is warm: images_per_s, loader_stall_s, train_s):"
    tee -a "$report" <"$work/run/results.csv"
    awk -F, 'NR > 1 && $15 > 0 { printf "epoch %d: %.1f images/s, waited for data %.2f s of %.1f s (%.1f%%)\n", $1, $13, $14, $15, 100 * $14 / $15 }' \
      "$work/run/results.csv" | tee -a "$report"
  fi
  if [[ -f "$out/train-cuda.log" ]]; then
    say "per iteration, each epoch (upload/download bytes, device_wait_ms: the GPU idle waiting for data):"
    grep -E 'device traffic per iteration' "$out/train-cuda.log" | tee -a "$report"
  fi

  # The same data through `segpipe serve` on loopback: with --remote and
  # --device cuda the training batches arrive windowed and the GPU expands
  # the masks (7 uploads per iteration — the window table and bytes in
  # place of the dense stack — where the local run has 6). One epoch,
  # validated on the val set (dense on the wire).
  port=18815
  ./segpipe serve --shards "$work" --addr "127.0.0.1:$port" >"$out/serve.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.2
  done
  step train-cuda-remote 60 ./segpipe train --remote "127.0.0.1:$port" --shards train/shards --val-shards val/shards \
    --variant n --epochs 1 --batch 32 --imgsz 640 --device cuda --out "$work/run-remote"
  kill "$serve_pid" 2>/dev/null
  wait "$serve_pid" 2>/dev/null
  if [[ -f "$out/train-cuda-remote.log" ]]; then
    say "per iteration, windowed over loopback (uploads 7 = windows expanded on the GPU):"
    grep -E 'device traffic per iteration' "$out/train-cuda-remote.log" | tee -a "$report"
  fi
fi

if [[ -f python/device_check.sh ]]; then
  step python-device-check 40 bash python/device_check.sh ./segpipe "$outroot/python"
else
  not_yet python-device-check "python/device_check.sh is not in this tree"
fi

say ""
say "done in $((SECONDS - start))s; report $report"
exit $failed
