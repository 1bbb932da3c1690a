// Package torchbench runs the PyTorch baseline script of the training
// benchmarks (trainer/model/testdata/bench_torch.py) and reads its result,
// so that the model's and the training loop's benchmarks time PyTorch the
// same way, in the same run as their own figures.
package torchbench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

// KeepMemoryEnv tells glibc's malloc to keep freed memory instead of
// returning large blocks to the OS and faulting them back every step; on
// these machines PyTorch's batch-8 step is about 2× faster with it, and the
// baselines are PyTorch at its best.
var KeepMemoryEnv = []string{"MALLOC_MMAP_MAX_=0", "MALLOC_TRIM_THRESHOLD_=68719476736", "MALLOC_TOP_PAD_=1073741824"}

// Result is what the script prints.
type Result struct {
	// SecPerIter is the best forward+backward time over the iterations
	// (after one warm-up).
	SecPerIter float64 `json:"sec_per_iter"`
	// OptStepSec is one MuSGD-style optimiser step (Newton–Schulz on the
	// weights with ndim ≥ 2, momentum SGD on the rest); 0 unless asked.
	OptStepSec float64 `json:"opt_step_sec"`
	Threads    int     `json:"threads"`
	Torch      string  `json:"torch"`
	// Device is "cpu" or the GPU's name.
	Device string `json:"device"`
}

// Config is one baseline run.
type Config struct {
	Python  string // interpreter, e.g. /usr/bin/python3
	Script  string // path of bench_torch.py
	Variant string
	Batch   int
	Imgsz   int
	Threads int
	Iters   int
	OptStep bool // also time one optimiser step
	// DefaultMalloc leaves glibc's allocator settings alone (without it
	// KeepMemoryEnv is set).
	DefaultMalloc bool
	// CUDA runs the model on GPU 0 (each step synchronised, cuDNN
	// benchmarking its algorithms); TF32 lets cuBLAS and cuDNN use TF32
	// there (off otherwise, as in segpipe).
	CUDA, TF32 bool
}

// Run executes the script and returns its result.
func Run(c Config) (Result, error) {
	args := []string{c.Script, c.Variant, strconv.Itoa(c.Batch), strconv.Itoa(c.Imgsz), strconv.Itoa(c.Threads), strconv.Itoa(max(c.Iters, 1))}
	if c.OptStep {
		args = append(args, "optstep")
	}
	if c.CUDA {
		args = append(args, "cuda")
		if c.TF32 {
			args = append(args, "tf32")
		}
	}
	cmd := exec.Command(c.Python, args...)
	cmd.Env = os.Environ()
	if !c.DefaultMalloc {
		cmd.Env = append(cmd.Env, KeepMemoryEnv...)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", cmd, err)
	}
	var r Result
	if err := json.Unmarshal(out, &r); err != nil {
		return Result{}, fmt.Errorf("%s: output %q: %w", cmd, out, err)
	}
	return r, nil
}

// Size is the batch and image size of the training benchmarks:
// SEGPIPE_BENCH_BATCH and SEGPIPE_BENCH_IMGSZ, default 8 and 640. Both
// benchmarks read it here so that their figures describe the same step.
func Size() (batch, imgsz int) {
	return envInt("SEGPIPE_BENCH_BATCH", 8), envInt("SEGPIPE_BENCH_IMGSZ", 640)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
