package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// kdev is what a kernel case needs from a device: its kernels, and
// buffers. The CPU harness (emuDev) and a GPU (gpuDev) implement it.
type kdev interface {
	kernels() *kernelSet
	// upload copies a []float32, []int32 or []byte into a new buffer.
	upload(data any) devptr
	// alloc returns a buffer of bytes filled with 0xFF (NaN as floats),
	// so a kernel that skips an element it should write is caught.
	alloc(bytes int) devptr
	// matmul is the device's GEMM (cuBLAS, or the harness's naive one).
	matmul() matmul
}

// kernelCase is one kernel check: run uploads inputs and launches, and
// returns the buffers to read back and the check of their bytes.
type kernelCase struct {
	name string
	run  func(d kdev) (outs []devptr, check func(t *testing.T, got [][]byte))
}

func toBytes(data any) []byte {
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, data); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func i32s(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// emuDev records a script for the CPU harness: buffers are numbered,
// and a device address is id<<32 + offset so that Ptr.Add works as on a device.
type emuDev struct {
	dir    string
	script strings.Builder
	sizes  map[uint64]int
	next   uint64
}

func (e *emuDev) kernels() *kernelSet {
	// Three blocks at most, so every grid-stride loop goes round.
	return &kernelSet{l: e, maxBlocks: 3}
}

func (e *emuDev) matmul() matmul { return emuMatmul{e} }

// emuMatmul hands a GEMM to the harness as cuBLAS would receive it, so
// the row-major mapping runs end to end on the CPU too.
type emuMatmul struct{ e *emuDev }

func (m emuMatmul) Gemm(g backend.Gemm, a, b, c devptr) error {
	return writeGemm(&m.e.script, g, a, b, c)
}

func (e *emuDev) alloc(n int) devptr {
	e.next++
	e.sizes[e.next] = n
	fmt.Fprintf(&e.script, "alloc %d %d\n", e.next, n)
	return devptr(e.next << 32)
}

func (e *emuDev) upload(data any) devptr {
	b := toBytes(data)
	p := e.alloc(len(b))
	f := filepath.Join(e.dir, fmt.Sprintf("in%d.bin", e.next))
	if err := os.WriteFile(f, b, 0o644); err != nil {
		panic(err)
	}
	fmt.Fprintf(&e.script, "load %d %s\n", e.next, f)
	return p
}

func (e *emuDev) launch(k kernel, grid, block dim3, args []arg) error {
	return writeLaunch(&e.script, k, grid, block, args)
}

// harnessBinary returns the harness binary, or skips the test where it
// cannot be built.
func harnessBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildHarness()
	skipWithoutHarness(t, err)
	return bin
}

// skipWithoutHarness skips the test where the harness cannot be built
// here and fails it on any other error.
func skipWithoutHarness(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, ErrNoHarness) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestKernelsOnCPU runs every kernel case through the CPU harness (the
// CUDA sources compiled with g++, a block's threads as fibers) and
// compares with the CPU reference.
func TestKernelsOnCPU(t *testing.T) {
	bin := harnessBinary(t)
	dir := t.TempDir()
	e := &emuDev{dir: dir, sizes: map[uint64]int{}}
	type pending struct {
		c     kernelCase
		files []string
		check func(*testing.T, [][]byte)
	}
	var all []pending
	for _, c := range kernelCases() {
		outs, check := c.run(e)
		p := pending{c: c, check: check}
		for _, o := range outs {
			id := uint64(o) >> 32
			f := filepath.Join(dir, fmt.Sprintf("out%d.bin", id))
			fmt.Fprintf(&e.script, "save %d %s\n", id, f)
			p.files = append(p.files, f)
		}
		all = append(all, p)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(e.script.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("harness: %v\n%s", err, out)
	}
	for _, p := range all {
		t.Run(p.c.name, func(t *testing.T) {
			var got [][]byte
			for _, f := range p.files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, b)
			}
			p.check(t, got)
		})
	}
}

// TestHarnessRejectsMismatchedArguments proves the harness's signature
// check: a launch whose argument kinds disagree with the kernel fails.
func TestHarnessRejectsMismatchedArguments(t *testing.T) {
	bin := harnessBinary(t)
	for _, script := range []string{
		"alloc 1 16\nlaunch fill 1 1 1 4 1 1 3 p1+0 i2 l4\n",                         // float passed as int
		"alloc 1 16\nlaunch fill 1 1 1 4 1 1 2 p1+0 f3f800000\n",                     // missing argument
		"alloc 1 16\nlaunch binary_forward 1 1 1 4 1 1 6 i0 s00 p1+0 p1+0 p1+0 l4\n", // short struct
		"launch no_such_kernel 1 1 1 1 1 1 0\n",
	} {
		cmd := exec.Command(bin)
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("script %q ran; want a rejection (output %s)", script, out)
		}
	}
}

// closeTo checks got (bytes of floats) against want and logs the worst
// relative error, the figure the GPU report quotes per kernel.
func closeTo(t *testing.T, what string, got []byte, want []float32, rtol float64) {
	t.Helper()
	g := f32s(got)
	if len(g) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(g), len(want))
	}
	atol := rtol * 1e-3
	w, at := tensor.Worst(g, want, rtol, atol)
	maxRel := 0.0
	for i := range want {
		if d := math.Abs(float64(g[i]-want[i])) / max(math.Abs(float64(want[i])), 1e-6); d > maxRel && !math.IsNaN(d) {
			maxRel = d
		}
	}
	t.Logf("%s: worst relative error %.3g (%d values)", what, maxRel, len(want))
	if w > 1 {
		t.Errorf("%s: element %d = %v, want %v (tolerance %g relative)", what, at, g[at], want[at], rtol)
	}
}
