// Package cudastub builds a stand-in for libcuda.so.1, cuBLAS and cuDNN
// (stub.c.in, C): every entry point the cuda package binds, doing no work and
// returning success with plausible handles, H200-like device attributes,
// increasing fake device addresses and one algorithm per cuDNN search.
// Pointed at by SEGPIPE_LIBCUDA, SEGPIPE_LIBCUBLAS and SEGPIPE_LIBCUDNN,
// it lets the real purego bindings drive a whole training step on a host
// without a GPU, which is how the backend's host cost per iteration and
// its calls into the three libraries are measured (BenchmarkHostIteration).
// It is for tests only: nothing it returns is data.
package cudastub

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

//go:embed stub.c.in
var source []byte

// ErrNoCompiler says the system C compiler is missing; tests skip on it.
var ErrNoCompiler = errors.New("cudastub: no C compiler (cc) to build the stub libraries")

// Build compiles the stub into dir and returns the library's path;
// defines (NAME or NAME=VALUE) are passed to the compiler as -D options:
// SEGPIPE_STUB_NO_OPTIONAL leaves out cuDNN's pooling and batch-norm.
func Build(dir string, defines ...string) (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", ErrNoCompiler
	}
	src := filepath.Join(dir, "stub.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", fmt.Errorf("cudastub: %w", err)
	}
	lib := filepath.Join(dir, "libsegpipe_cudastub.so")
	args := []string{"-shared", "-fPIC", "-O2", "-o", lib, src}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	out, err := exec.Command(cc, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cudastub: %s: %w\n%s", cc, err, out)
	}
	return lib, nil
}

// Install builds the stub and points the three override variables at it
// for the rest of tb (restored after). It skips tb without a C compiler.
// The cuda package opens each library once per process, so Install must
// run before anything in the process has tried to.
func Install(tb testing.TB, defines ...string) *Stub {
	tb.Helper()
	lib, err := Build(tb.TempDir(), defines...)
	if errors.Is(err, ErrNoCompiler) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	for _, v := range []string{"SEGPIPE_LIBCUDA", "SEGPIPE_LIBCUBLAS", "SEGPIPE_LIBCUDNN"} {
		tb.Setenv(v, lib)
	}
	// The stub's algorithm choices must not reach the user's cache of
	// real ones.
	tb.Setenv("SEGPIPE_CUDNN_CACHE", filepath.Join(filepath.Dir(lib), "cudnn-plans.json"))
	return &Stub{Path: lib}
}

// Stub is a built stub library.
type Stub struct {
	Path string
	c    *counters
}
