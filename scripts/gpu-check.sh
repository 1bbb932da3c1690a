#!/usr/bin/env bash
# gpu-check.sh: the checks segpipe runs on a GPU machine, as one report
# that fits one 5-minute run.
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
# and, for the receive-cpu step's native transport (optional, cgo):
#
#   CGO_ENABLED=1 go build -buildmode=c-shared -o python/segpipe/_native/libsegpipe.so ./python/native
#
# The GPU machine may have no Go, so the tests run as those prebuilt test
# binaries (with Go and no binaries, the script builds them first, inside
# its budget). Then, on the GPU machine, from the repository root:
#
#   bash scripts/gpu-check.sh            # report in $OUT/gpu-check/report.txt
#
# How it spends its budget (GPU_CHECK_BUDGET seconds, 290 by default):
#
#   - Every line of every step goes to the report as it is printed
#     (report.txt, prefixed with the step's name; each step's whole output
#     also in NAME.log) and each step's outcome to results.tsv, so a run
#     cut short loses nothing it had printed.
#   - `segpipe train --device cuda`, the one end-to-end run, goes first
#     after the preflight, so no earlier step can eat its time.
#   - Each GPU test runs in its own process with its own timeout: a sticky
#     device fault fails that test alone, with its own cause. A failed test
#     is run again with CUDA_LAUNCH_BLOCKING=1, so its error names the
#     launch that faulted, when the budget allows.
#   - CUDA_CACHE_PATH keeps the driver's compiled PTX under $OUT for the
#     whole run, so the kernels are JIT-compiled once, not per process;
#     SEGPIPE_CUDNN_ALGO=heuristic (unless set) plans convolutions with
#     cuDNN's heuristics rather than timing every candidate of every shape,
#     and SEGPIPE_CUDNN_CACHE keeps the choices for the run's later
#     processes (cudnn-plans.json under $OUT).
#   - nvidia-smi samples utilisation and memory every 0.5 s during the
#     throughput and training steps (NAME.smi.csv; mean and peak in the
#     report).
#   - The throughput steps report, per training step, the host's time to
#     queue it and the device's time between two events around it.
#   - PyTorch's full iteration (forward, backward, optimiser step) runs at
#     fp32, TF32 and TF32 + AMP in channels_last when PyTorch is there.
#   - compute-sanitizer --tool memcheck runs the kernel tests when it is
#     installed.
#
# Without a GPU (no nvidia-smi, or `segpipe device` finds no usable
# device) every GPU step is reported SKIPPED with the reason and the exit
# status is 0: that is the dry run. With a GPU, the exit status is 1 when
# any step failed or timed out.
#
# It needs no network. SEGPIPE_BENCH_TORCH names the Python whose PyTorch
# is the throughput baseline (default $TORCH_VENV/bin/python),
# GPU_CHECK_TRAIN_IMAGES the size of the short training run's data (256).
# The CUDA libraries are found in the nvidia/*/lib folders of
# /opt/torch/.venv (PyTorch's wheels) unless TORCH_VENV says otherwise.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

outroot="${OUT:-$PWD/gpu-check-out}"
out="$outroot/gpu-check"
mkdir -p "$out"
report="$out/report.txt"
results="$out/results.tsv"
: >"$report"
printf 'step\tstatus\tseconds\tdetail\n' >"$results"
venv="${TORCH_VENV:-/opt/torch/.venv}"
start=$SECONDS
failed=0
budget="${GPU_CHECK_BUDGET:-290}"

export CUDA_CACHE_PATH="${CUDA_CACHE_PATH:-$outroot/cuda-cache}"
export CUDA_CACHE_MAXSIZE="${CUDA_CACHE_MAXSIZE:-4294967296}"
export SEGPIPE_CUDNN_ALGO="${SEGPIPE_CUDNN_ALGO:-heuristic}"
export SEGPIPE_CUDNN_CACHE="${SEGPIPE_CUDNN_CACHE:-$outroot/cudnn-plans.json}"
mkdir -p "$CUDA_CACHE_PATH"

say() { printf '%s\n' "$*" >>"$report"; printf '%s\n' "$*"; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results"; }

# skip NAME REASON: a step that cannot run here, and why.
skip() {
  say ""
  say "==== $1 ===="
  say "---- $1: SKIPPED: $2"
  record "$1" skipped 0 "$2"
}

# step NAME TIMEOUT_SECONDS COMMAND...: runs the command with its own
# timeout, cut to what is left of the budget (minus the kill grace); a
# step that would get less than 10 s is not started. Output streams into
# the report line by line and whole into NAME.log. Sets step_rc.
step_rc=0
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((budget - (SECONDS - start) - 5))
  say ""
  say "==== $name ===="
  if ((left < 10)); then
    say "---- $name: NOT RUN: the ${budget}s budget is spent"
    record "$name" not-run 0 "budget spent"
    failed=1
    step_rc=125
    return
  fi
  ((limit > left)) && limit=$left
  say "\$ $* (timeout ${limit}s)"
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$out/$name.log" | sed -u "s/^/  [$name] /" >>"$report"
  step_rc=${PIPESTATUS[0]}
  local took=$((SECONDS - t0))
  if [[ $step_rc -eq 124 || $step_rc -eq 137 ]]; then
    say "---- $name: TIMED OUT after ${limit}s"
    record "$name" timed-out "$took" "limit ${limit}s"
    failed=1
  elif [[ $step_rc -ne 0 ]]; then
    say "---- $name: FAILED (exit $step_rc) in ${took}s; full output in $name.log"
    record "$name" failed "$took" "exit $step_rc"
    failed=1
  else
    say "---- $name: ok in ${took}s"
    record "$name" ok "$took" ""
  fi
}

# sampled NAME TIMEOUT COMMAND...: step with nvidia-smi sampling beside it.
sampled() {
  local name="$1" smi_pid=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,memory.total,power.draw \
      --format=csv,noheader,nounits -lms 500 >"$out/$name.smi.csv" 2>/dev/null &
    smi_pid=$!
  fi
  step "$@"
  if [[ -n "$smi_pid" ]]; then
    kill "$smi_pid" 2>/dev/null
    wait "$smi_pid" 2>/dev/null
    awk -F', *' -v name="$name" '$2 ~ /^[0-9]+$/ { n++; u += $2; if ($2 > umax) umax = $2; if ($3 > mmax) mmax = $3; tot = $4 }
      END { if (n) printf "%s: GPU utilisation mean %.0f%%, max %d%%; peak memory %d of %d MiB (%d samples of 0.5 s)\n", name, u / n, umax, mmax, tot, n
            else printf "%s: no nvidia-smi samples\n", name }' "$out/$name.smi.csv" | tee -a "$report"
  fi
}

say "segpipe gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
say "repository: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
say "budget ${budget}s; CUDA_CACHE_PATH=$CUDA_CACHE_PATH; SEGPIPE_CUDNN_ALGO=$SEGPIPE_CUDNN_ALGO; SEGPIPE_CUDNN_CACHE=$SEGPIPE_CUDNN_CACHE"

# The active environment's wheels are what the cuda package searches
# before the system's (VIRTUAL_ENV); LD_LIBRARY_PATH gets them too, for
# the libraries cuDNN and cuBLAS open by soname themselves.
libdirs="$(ls -d "$venv"/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | paste -sd: -)"
if [[ -n "$libdirs" ]]; then
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export VIRTUAL_ENV="${VIRTUAL_ENV:-$venv}"
  say "LD_LIBRARY_PATH += the nvidia/*/lib folders of $venv"
else
  say "no nvidia/*/lib folders under $venv: relying on the system's CUDA libraries"
fi

# ---- preflight: is there a GPU, and does segpipe see it? -------------
have_go=0
command -v go >/dev/null 2>&1 && have_go=1
segpipe=""
if [[ -x ./segpipe ]]; then
  segpipe=./segpipe
elif ((have_go)); then
  step build-segpipe 60 env CGO_ENABLED=0 go build -o segpipe .
  [[ -x ./segpipe ]] && segpipe=./segpipe
fi

gpu=1
why=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  gpu=0
  why="no nvidia-smi on this host (no NVIDIA driver)"
else
  step nvidia-smi 15 nvidia-smi
fi
if [[ -z "$segpipe" ]]; then
  gpu=0
  why="${why:+$why; }./segpipe is missing and there is no Go to build it (see the top of this script)"
else
  "$segpipe" device >"$out/segpipe-device.log" 2>&1
  dev_rc=$?
  sed 's/^/  [segpipe-device] /' "$out/segpipe-device.log" >>"$report"
  if ((dev_rc != 0)); then
    reason="$(tail -n 1 "$out/segpipe-device.log")"
    if ((gpu)); then
      # A driver but no usable device: a broken setup, not a dry run.
      say "---- segpipe-device: FAILED: $reason"
      record segpipe-device failed 0 "$reason"
      failed=1
    fi
    gpu=0
    why="${why:+$why; }$reason"
  else
    record segpipe-device ok 0 ""
  fi
fi
if ((!gpu)); then
  say ""
  say "no usable GPU: $why"
fi

# gpu_step NAME TIMEOUT COMMAND...: a step that needs the GPU.
gpu_step() {
  if ((!gpu)); then
    skip "$1" "no usable GPU ($why)"
    step_rc=0
    return
  fi
  step "$@"
}

# ---- the test binaries -------------------------------------------------
bins=(trainer/tensor/cuda/cuda.test trainer/loss/losscuda/losscuda.test trainer/gpucheck/gpucheck.test trainer/tensor/tensor.test)
pkgs=(./trainer/tensor/cuda ./trainer/loss/losscuda ./trainer/gpucheck ./trainer/tensor)
if ((gpu && have_go)); then
  for i in "${!bins[@]}"; do
    [[ -x "${bins[$i]}" ]] || step "build-${bins[$i]##*/}" 90 env CGO_ENABLED=0 go test -c -o "${bins[$i]}" "${pkgs[$i]}"
  done
fi
have_bins=1
for b in "${bins[@]}"; do [[ -x "$b" ]] || have_bins=0; done
if ((gpu && !have_bins)); then
  gpu=0
  why="the test binaries are missing and there is no Go to build them (see the top of this script)"
  say "---- FAILED: $why"
  failed=1
fi

# ---- segpipe train --device cuda, first so that nothing starves it ----
# Batch 32 at 640 px, two epochs of GPU_CHECK_TRAIN_IMAGES synthetic
# COCO-like images (`segpipe synth`, long side 640; default 256: about 8
# iterations an epoch), validated once at the end on 64 others (another
# seed). Epoch 2 is warm: its images_per_s and loader_stall_s in
# results.csv are the figures; the log's "device traffic per iteration"
# line has the host-device bytes per step and device_wait_ms, the GPU's
# idle time between one step and the next.
work="$outroot/train-cuda"
if ((gpu)); then
  rm -rf "$work"
  images="${GPU_CHECK_TRAIN_IMAGES:-256}"
  step train-data 60 bash -c 'set -e
    for set in "train $2 1" "val 64 2"; do
      read -r split n seed <<<"$set"
      "$1" synth --out "$3/$split" --images "$n" --seed "$seed" --split "$split" >/dev/null
      "$1" convert coco --annotations "$3/$split/annotations/instances_$split.json" --images "$3/$split/images" \
        --out "$3/shards/$split" >/dev/null
    done' train-data "$segpipe" "$images" "$work/data"
  sampled train-cuda 110 "$segpipe" train --shards "$work/data/shards/train" --val-shards "$work/data/shards/val" --variant n \
    --epochs 2 --val-every 2 --batch 32 --imgsz 640 --device cuda --out "$work/run"
  if [[ -f "$work/run/results.csv" ]]; then
    say "results.csv (epoch 2 is warm: images_per_s, loader_stall_s, train_s):"
    tee -a "$report" <"$work/run/results.csv"
    awk -F, 'NR > 1 && $15 > 0 { printf "epoch %d: %.1f images/s, waited for data %.2f s of %.1f s (%.1f%%)\n", $1, $13, $14, $15, 100 * $14 / $15 }' \
      "$work/run/results.csv" | tee -a "$report"
  fi
  if [[ -f "$out/train-cuda.log" ]]; then
    say "per iteration, each epoch (upload/download bytes, device_wait_ms: the GPU idle waiting for the host):"
    grep -E 'device traffic per iteration' "$out/train-cuda.log" | tee -a "$report"
  fi
else
  skip train-data "no usable GPU ($why)"
  skip train-cuda "no usable GPU ($why)"
fi

# ---- each GPU test in its own process -------------------------------
# gpu_tests BIN_DIR BIN PATTERN: the top-level tests of BIN matching
# PATTERN, one a line.
gpu_tests() { (cd "$1" && "./$2" -test.list "$3" 2>/dev/null) | grep -E '^Test' || true; }

# one_test LABEL DIR BIN TEST TIMEOUT: runs TEST alone; on a failure runs it
# again with CUDA_LAUNCH_BLOCKING=1 (each launch waited for, so the error
# names the launch that faulted).
one_test() {
  local label="$1" dir="$2" bin="$3" t="$4" limit="$5"
  step "$label" "$limit" bash -c "cd '$dir' && ./'$bin' -test.v -test.count=1 -test.run '^$t\$'"
  if [[ $step_rc -ne 0 && $step_rc -ne 125 ]]; then
    step "$label-blocking" "$limit" env CUDA_LAUNCH_BLOCKING=1 bash -c "cd '$dir' && ./'$bin' -test.v -test.count=1 -test.run '^$t\$'"
  fi
  if [[ -f "$out/$label.log" ]] && grep -q -- "--- SKIP: $t" "$out/$label.log"; then
    say "---- $label: FAILED: $t skipped on a GPU host (see $label.log)"
    record "$label" failed 0 "skipped on a GPU host"
    failed=1
  fi
}

if ((gpu)); then
  # The kernels against the CPU reference, cuBLAS GEMMs, cuDNN
  # convolutions, pinned copies and events, the optimiser's device twins
  # (trainer/tensor/cuda); the loss's device kernels (losscuda);
  # inference, checkpoints and the train loop on the GPU (gpucheck).
  for spec in "trainer/tensor/cuda cuda.test" "trainer/loss/losscuda losscuda.test" "trainer/gpucheck gpucheck.test"; do
    read -r dir bin <<<"$spec"
    for t in $(gpu_tests "$dir" "$bin" 'OnGPU'); do
      [[ "$t" == TestIterationOnGPU ]] && continue # its own step below
      one_test "gpu-${bin%.test}-$t" "$dir" "$bin" "$t" 45
    done
  done
  if [[ -n "$(cat "$out"/gpu-*.log 2>/dev/null)" ]]; then
    say ""
    say "worst relative error per kernel check (TF32 off unless named):"
    cat "$out"/gpu-*.log | grep -E -- '--- (PASS|FAIL|SKIP)|worst relative error|algorithms fwd' | sed 's/^ */  /' | tee -a "$report" >/dev/null
  fi
else
  skip gpu-tests "no usable GPU ($why): each …OnGPU test of trainer/tensor/cuda, trainer/loss/losscuda and trainer/gpucheck would run in its own process"
fi

# The conformance suite of trainer/tensor on the cuda backend against the
# CPU reference, 1e-3 relative with TF32 off; each op's worst case.
if ((gpu)); then
  one_test conformance-cuda trainer/tensor tensor.test 'TestConformance' 45
else
  skip conformance-cuda "no usable GPU ($why)"
fi

# One training iteration of variant n, batch 2, 256 px, from the golden
# weights: the loss items, every parameter gradient and the batch-norm
# state against the CPU backend at 1e-3.
if ((gpu)); then
  one_test iteration-vs-cpu trainer/gpucheck gpucheck.test TestIterationOnGPU 60
else
  skip iteration-vs-cpu "no usable GPU ($why)"
fi

# ---- throughput: the training step, each batch size in its own process
# Variant n, 640 px, train-mode forward and backward, fp32 and TF32,
# against PyTorch eager on the same GPU when SEGPIPE_BENCH_TORCH has it.
torch_py="${SEGPIPE_BENCH_TORCH:-$venv/bin/python}"
if ((gpu)); then
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
    sampled "$name" 60 bash -c "cd trainer/gpucheck && ./gpucheck.test -test.v -test.run '^\$' -test.bench 'TrainStepOnGPU/^batch=$b\$' -test.benchtime 1x"
    if [[ -f "$out/$name.log" ]]; then
      say "training step, batch $b at 640 px (best-s/step, img/s, host-queue-ms/step, device-ms/step from events, host-device-B/step, torch-best-s/step, go/torch):"
      grep -E '^BenchmarkTrainStepOnGPU' "$out/$name.log" | tee -a "$report"
    fi
  done
else
  skip throughput-batch32 "no usable GPU ($why)"
  skip throughput-batch16 "no usable GPU ($why)"
fi

# ---- the same data through `segpipe serve` on loopback ------------------
# With --remote and --device cuda the training batches arrive windowed and
# the GPU expands the masks (7 uploads an iteration where the local run
# has 6). One epoch, validated on the val set.
if ((gpu)) && [[ -d "$work/data/shards/train" ]]; then
  port=18815
  "$segpipe" serve --shards "$work/data/shards" --addr "127.0.0.1:$port" >"$out/serve.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.2
  done
  step train-cuda-remote 60 "$segpipe" train --remote "127.0.0.1:$port" --shards train --val-shards val \
    --variant n --epochs 1 --batch 32 --imgsz 640 --device cuda --out "$work/run-remote"
  kill "$serve_pid" 2>/dev/null
  wait "$serve_pid" 2>/dev/null
  if [[ -f "$out/train-cuda-remote.log" ]]; then
    say "per iteration, windowed over loopback (uploads 7 = windows expanded on the GPU):"
    grep -E 'device traffic per iteration' "$out/train-cuda-remote.log" | tee -a "$report"
  fi
elif ((gpu)); then
  skip train-cuda-remote "the training data of train-data is missing"
else
  skip train-cuda-remote "no usable GPU ($why)"
fi

# ---- compute-sanitizer on the kernel tests --------------------------
if ! command -v compute-sanitizer >/dev/null 2>&1; then
  skip sanitizer "compute-sanitizer is not installed"
elif ((!gpu)); then
  skip sanitizer "no usable GPU ($why)"
else
  step sanitizer 60 bash -c "cd trainer/tensor/cuda && compute-sanitizer --tool memcheck --error-exitcode 9 \
    ./cuda.test -test.count=1 -test.run '^TestKernelsOnGPU\$'"
fi

# ---- PyTorch's full iteration --------------------------------------------
# PyTorch's full iteration (forward, backward, the MuSGD-style step) on
# the same GPU at fp32, TF32, and TF32 + AMP (float16 autocast, scaled
# loss) in channels_last, as Ultralytics trains: the baselines the
# throughput steps' go/torch ratios leave out. Its loss is the sum of the
# outputs (bench_torch.py "full"), not YOLO26-seg's.
if ((gpu)) && [[ -n "${SEGPIPE_BENCH_TORCH:-}" ]]; then
  for mode in "fp32:" "tf32:tf32" "amp-channels-last:tf32 amp cl"; do
    label=${mode%%:*}
    flags=${mode#*:}
    # shellcheck disable=SC2086 # flags are words
    step "torch-full-iteration-$label" 40 "$SEGPIPE_BENCH_TORCH" trainer/model/testdata/bench_torch.py n 32 640 16 5 full cuda $flags
  done
elif ((gpu)); then
  skip torch-full-iteration "no PyTorch (SEGPIPE_BENCH_TORCH)"
else
  skip torch-full-iteration "no usable GPU ($why)"
fi

if [[ -f python/device_check.sh && -n "$segpipe" ]]; then
  if ((gpu)); then
    step python-device-check 40 bash python/device_check.sh "$segpipe" "$outroot/python"
  else
    skip python-device-check "no usable GPU ($why)"
  fi
else
  skip python-device-check "python/device_check.sh or ./segpipe is not in this tree"
fi

# ---- receive CPU on this host ---------------------------------------------
# The client CPU a b32@640 batch costs to receive over loopback, server and
# client pinned to separate cores: pyarrow's transport, and the loader
# library's (FlightBatches transport="native") when a libsegpipe.so is
# carried (python/segpipe/_native/ or SEGPIPE_LIBRARY). No GPU needed: it
# is the figure a 2-core development machine cannot give for a GPU host.
# Run only with a minute of the budget left, after every GPU step.
lib="${SEGPIPE_LIBRARY:-$PWD/python/segpipe/_native/libsegpipe.so}"
if [[ -z "$segpipe" || ! -x "${SEGPIPE_BENCH_TORCH:-}" ]]; then
  skip receive-cpu "needs ./segpipe and a Python with pyarrow and torch (SEGPIPE_BENCH_TORCH)"
elif ((budget - (SECONDS - start) < 75)); then
  skip receive-cpu "less than 75 s of the budget left"
else
  modes=raw,dense,windowed
  [[ -f "$lib" ]] && modes+=,native-raw,native-dense,native-windowed
  step receive-cpu 70 env SEGPIPE_BINARY="$segpipe" SEGPIPE_LIBRARY="$lib" SEGPIPE_PY="$SEGPIPE_BENCH_TORCH" MODES="$modes" bash -c '
    set -e
    d=$(mktemp -d)
    trap "rm -rf $d" EXIT
    "$SEGPIPE_BINARY" synth --out "$d/synth" --images 320 --seed 3 >/dev/null
    "$SEGPIPE_BINARY" convert coco --annotations "$d/synth/annotations/instances_train.json" \
      --images "$d/synth/images" --out "$d/shards/train" >/dev/null
    "$SEGPIPE_PY" python/tests/profile_flight_client.py --shards "$d/shards/train" \
      --rounds 1 --epochs 3 --modes "$MODES" --json "'"$out"'/receive-cpu.json"'
fi

say ""
say "done in $((SECONDS - start))s of ${budget}s; report $report, outcomes $results"
exit $failed
