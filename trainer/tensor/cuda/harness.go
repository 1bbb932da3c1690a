package cuda

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/segpipe/segpipe/trainer/internal/cudalaunch"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// The CPU harness: the kernels/*.cu sources, and every declared module's
// (DeclareModule), compiled with g++ as one program (kernels/harness.cpp:
// blocks two at a time in a shuffled order, a block's threads as fibers,
// shared memory NaN at each block's start) and driven over pipes, with naive stand-ins for cuBLAS's GEMM and cuDNN's
// convolutions. It is not a GPU: a Backend on it checks what the Go code
// launches, with which arguments, against the CPU backend, on hosts
// without a GPU. It lives outside the test files so that the packages
// that own kernels (trainer/loss/losscuda) and the whole-system checks
// (trainer/gpucheck) run on it too; cudatest wraps it for tests.

// ErrNoHarness is wrapped by NewHarnessBackend's error where the harness
// cannot be built on this host: no g++, or no kernel sources (a binary
// built with -trimpath or away from the source tree).
var ErrNoHarness = errors.New("cuda: no CPU harness on this host")

// HarnessOptions shape a harness Backend's launches; zero fields take the
// defaults.
type HarnessOptions struct {
	// MaxBlocks caps every grid (default 3), Threads is every block's
	// size (a power of two up to 256, default 32): few small blocks make
	// grid-stride and per-channel loops go round on small tensors.
	// TestGPUGeometryOnHarness runs at an H200's 1,056 × 256.
	MaxBlocks, Threads int
}

// NewHarnessBackend returns a Backend over a fresh CPU harness process,
// which ends with Close. The harness binary is built once per set of
// sources (g++ -std=c++20) into the user's cache directory. Batch-norm
// tiles are 256 elements, so a model's batch-norms at 64 px take the
// tiled kernels as they do at 640 px on a GPU.
func NewHarnessBackend(o HarnessOptions) (*Backend, error) {
	be, _, err := newHarness(o)
	return be, err
}

// newHarness starts a harness process and returns a Backend on it and
// its engine, whose counters and trace the package's own tests read.
func newHarness(o HarnessOptions) (*Backend, *harnessEngine, error) {
	if o.MaxBlocks <= 0 {
		o.MaxBlocks = 3
	}
	if o.Threads <= 0 {
		o.Threads = 32
	}
	if o.Threads > blockSize || o.Threads&(o.Threads-1) != 0 {
		return nil, nil, fmt.Errorf("cuda harness: %d threads a block, want a power of two up to %d", o.Threads, blockSize)
	}
	bin, err := buildHarness()
	if err != nil {
		return nil, nil, err
	}
	e := &harnessEngine{live: map[uint64]int{}}
	e.cmd = exec.Command(bin)
	e.cmd.Stderr = &e.stderr
	if e.in, err = e.cmd.StdinPipe(); err != nil {
		return nil, nil, fmt.Errorf("cuda harness: %w", err)
	}
	out, err := e.cmd.StdoutPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("cuda harness: %w", err)
	}
	if err := e.cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("cuda harness: %w", err)
	}
	e.w, e.r = bufio.NewWriterSize(e.in, 1<<16), bufio.NewReaderSize(out, 1<<16)
	return newBackend(e, &kernelSet{l: e, maxBlocks: o.MaxBlocks, threads: o.Threads, bnTile: 256}), e, nil
}

// buildHarness returns the path of the harness binary, built (or found
// in the cache) at most once per process and set of kernel sources.
func buildHarness() (string, error) {
	var sources []string
	for _, m := range declaredModules() {
		sources = append(sources, m.source)
	}
	key := strings.Join(sources, "\x00")
	harnessBuilds.Lock()
	defer harnessBuilds.Unlock()
	if b, ok := harnessBuilds.m[key]; ok {
		return b.bin, b.err
	}
	bin, err := compileHarness(sources)
	if harnessBuilds.m == nil {
		harnessBuilds.m = map[string]harnessBuild{}
	}
	harnessBuilds.m[key] = harnessBuild{bin, err}
	return bin, err
}

type harnessBuild struct {
	bin string
	err error
}

var harnessBuilds struct {
	sync.Mutex
	m map[string]harnessBuild
}

// kernelSources is the directory of kernels/*.cu and harness.cpp: beside
// this file in the source tree.
func kernelSources() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("%w: cannot locate the package's source", ErrNoHarness)
	}
	dir := filepath.Join(filepath.Dir(file), "kernels")
	if _, err := os.Stat(filepath.Join(dir, "harness.cpp")); err != nil {
		return "", fmt.Errorf("%w: kernel sources: %w", ErrNoHarness, err)
	}
	return dir, nil
}

// sanitizeEnv, set to 1, builds and runs the harness with
// AddressSanitizer and UndefinedBehaviorSanitizer (g++
// -fsanitize=address,undefined): a kernel's out-of-bounds access to a
// buffer, its stack or its shared memory, or undefined arithmetic, ends
// the harness with the sanitizer's report instead of passing unnoticed.
// CI runs the harness tests so once; it is several times slower.
const sanitizeEnv = "SEGPIPE_HARNESS_SANITIZE"

func sanitizeHarness() bool { return os.Getenv(sanitizeEnv) == "1" }

// compileHarness builds kernels/harness.cpp with g++ into the cache,
// with this package's kernels/*.cu and the declared modules' sources
// (modules), named by the hash of every source it includes, unless it is
// there.
func compileHarness(modules []string) (string, error) {
	dir, err := kernelSources()
	if err != nil {
		return "", err
	}
	gxx, err := exec.LookPath("g++")
	if err != nil {
		return "", fmt.Errorf("%w: g++ not found: the kernels' CPU harness needs a C++20 compiler (apt-get install g++)", ErrNoHarness)
	}
	// Reading every source also makes go test's result cache depend on
	// them (it does not see the files g++ opens).
	srcs, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		return "", fmt.Errorf("cuda harness: %w", err)
	}
	srcs = append(srcs, modules...)
	args := []string{"-std=c++20", "-O2", "-pthread", "-Wall", "-Werror"}
	if sanitizeHarness() {
		args = []string{"-std=c++20", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
			"-fno-sanitize-recover=all", "-pthread", "-Wall", "-Werror"}
	}
	h := sha256.New()
	fmt.Fprintln(h, gxx, strings.Join(args, " "))
	var sources [][]byte // the .cu files'
	var includes bytes.Buffer
	for _, s := range srcs {
		if filepath.Ext(s) == ".ptx" {
			continue
		}
		b, err := os.ReadFile(s)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && slices.Contains(modules, s) {
				return "", fmt.Errorf("%w: a declared module's source: %w", ErrNoHarness, err)
			}
			return "", fmt.Errorf("cuda harness: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(s), len(b))
		h.Write(b)
		if filepath.Ext(s) == ".cu" {
			sources = append(sources, b)
			fmt.Fprintf(&includes, "#include %q\n", s)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "segpipe", "cuda-harness", hex.EncodeToString(h.Sum(nil))[:24])
	bin := filepath.Join(out, "harness")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("cuda harness: %w", err)
	}
	// Built under a temporary name and renamed, so that test binaries
	// building at once never run a half-written file.
	tmp, err := os.CreateTemp(out, "harness-*")
	if err != nil {
		return "", fmt.Errorf("cuda harness: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	// The sources to compile, and the kernel table's entries, one per
	// SP_KERNEL of the sources.
	if err := os.WriteFile(filepath.Join(out, "sources.inc"), includes.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("cuda harness: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, "kernels.inc"), kernelTable(sources), 0o644); err != nil {
		return "", fmt.Errorf("cuda harness: %w", err)
	}
	// -I dir: a module's source includes shim.h from this folder.
	cmd := exec.Command(gxx, append(args, "-I", out, "-I", dir, "-o", tmp.Name(), filepath.Join(dir, "harness.cpp"))...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cuda harness: g++ kernels/harness.cpp: %w\n%s", err, b)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("cuda harness: %w", err)
	}
	return bin, nil
}

// kernelDecl finds a kernel's declaration in a .cu source.
var kernelDecl = regexp.MustCompile(`(?m)^SP_KERNEL void (\w+)\(`)

// kernelTable is kernels.inc: K(name) for every kernel the sources
// declare, which harness.cpp's kernel table includes.
func kernelTable(sources [][]byte) []byte {
	var b bytes.Buffer
	for _, src := range sources {
		for _, m := range kernelDecl.FindAllSubmatch(src, -1) {
			fmt.Fprintf(&b, "K(%s)\n", m[1])
		}
	}
	return b.Bytes()
}

// harnessEngine is the engine of a Backend over the CPU harness: a
// harness process driven over pipes, its buffers numbered (a device address is
// id<<32 + byte offset, so Ptr.Add works as on a device), its launches
// the .cu kernels compiled with g++, and naive stand-ins for cuBLAS's
// GEMM and cuDNN's convolutions. It is not a GPU: it checks what the
// Backend launches and with which arguments, against the CPU backend.
type harnessEngine struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	in     io.WriteCloser
	w      *bufio.Writer
	r      *bufio.Reader
	stderr bytes.Buffer
	next   uint64
	live   map[uint64]int // buffer id → bytes
	plans  int            // planConv calls
	convs  int            // convolution passes run
	// launches counts kernel launches, the clock of the staging trace.
	launches int
	stage    []stageTrace // what a Stager on the harness queued, in order
	err      error
}

// failed turns an I/O error with the harness into its own message.
func (e *harnessEngine) failed(err error) error {
	if e.err == nil {
		e.w.Flush()
		e.in.Close()
		e.cmd.Wait()
		e.err = fmt.Errorf("harness: %v: %s", err, bytes.TrimSpace(e.stderr.Bytes()))
	}
	return e.err
}

func (e *harnessEngine) do(f func() error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	if err := f(); err != nil {
		return e.failed(err)
	}
	return nil
}

func (e *harnessEngine) launch(k kernel, grid, block dim3, args []arg) error {
	return e.do(func() error {
		e.launches++
		return writeLaunch(e.w, k, grid, block, args)
	})
}

// launchCount is the number of kernel launches queued so far.
func (e *harnessEngine) launchCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.launches
}

func (e *harnessEngine) alloc(bytes int) (devptr, error) {
	var p devptr
	err := e.do(func() error {
		e.next++
		e.live[e.next] = bytes
		p = devptr(e.next << 32)
		_, err := fmt.Fprintf(e.w, "alloc %d %d\n", e.next, bytes)
		return err
	})
	return p, err
}

func (e *harnessEngine) free(p devptr) error {
	return e.do(func() error {
		id := uint64(p) >> 32
		if _, ok := e.live[id]; !ok || uint64(p)&0xffffffff != 0 {
			return fmt.Errorf("free of %#x, which alloc did not return", uint64(p))
		}
		delete(e.live, id)
		_, err := fmt.Fprintf(e.w, "free %d\n", id)
		return err
	})
}

func (e *harnessEngine) upload(dst devptr, src []byte) error {
	return e.do(func() error {
		if _, err := fmt.Fprintf(e.w, "write %d %d %d\n", uint64(dst)>>32, uint64(dst)&0xffffffff, len(src)); err != nil {
			return err
		}
		_, err := e.w.Write(src)
		return err
	})
}

func (e *harnessEngine) download(dst []byte, src devptr) error {
	return e.do(func() error {
		if _, err := fmt.Fprintf(e.w, "read %d %d %d\n", uint64(src)>>32, uint64(src)&0xffffffff, len(dst)); err != nil {
			return err
		}
		if err := e.w.Flush(); err != nil {
			return err
		}
		_, err := io.ReadFull(e.r, dst)
		return err
	})
}

func (e *harnessEngine) sync() error {
	return e.do(func() error {
		if _, err := io.WriteString(e.w, "sync\n"); err != nil {
			return err
		}
		if err := e.w.Flush(); err != nil {
			return err
		}
		line, err := e.r.ReadString('\n')
		if err == nil && line != "ok\n" {
			err = fmt.Errorf("sync answered %q", line)
		}
		return err
	})
}

func (e *harnessEngine) hold(f func(l launcher, mm matmul) error) error {
	return f(e, engineMatmul{e})
}

func (e *harnessEngine) gemm(g backend.Gemm, a, b, c devptr) error {
	return e.do(func() error { return writeGemm(e.w, g, a, b, c) })
}

// planConv stands in for cuDNN's algorithm search: a plan with no
// descriptors, counted so that tests see the Backend's cache work.
func (e *harnessEngine) planConv(c convShape) (*convPlan, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.plans++
	return &convPlan{convShape: c}, nil
}

func (e *harnessEngine) conv(pass string, p *convPlan, a, b, c devptr) error {
	return e.do(func() error {
		e.convs++
		cv := p.convShape
		_, err := fmt.Fprintf(e.w, "conv %s %d %d %d %d %d %d %d %d %d %d %s %s %s\n", pass, cv.N, cv.InC, cv.InH, cv.InW,
			cv.OutC, cv.KH, cv.KW, cv.Stride, cv.Pad, cv.Groups, harnessPtr(a), harnessPtr(b), harnessPtr(c))
		return err
	})
}

func (e *harnessEngine) convForward(p *convPlan, x, w, y devptr) error {
	return e.conv("f", p, x, w, y)
}
func (e *harnessEngine) convBackwardData(p *convPlan, dy, w, dx devptr, accumulate bool) error {
	if !accumulate {
		return e.conv("D", p, dy, w, dx) // written, as cuDNN's beta 0
	}
	return e.conv("d", p, dy, w, dx)
}
func (e *harnessEngine) convBackwardFilter(p *convPlan, x, dy, dw devptr) error {
	return e.conv("w", p, x, dy, dw)
}

// close ends the harness; a failure it reported before is the error.
func (e *harnessEngine) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	e.w.Flush()
	e.in.Close()
	if err := e.cmd.Wait(); err != nil {
		return fmt.Errorf("harness: %v: %s", err, bytes.TrimSpace(e.stderr.Bytes()))
	}
	e.err = errors.New("harness closed")
	return nil
}

// stageTrace is one thing a Stager queued on the harness: a batch's
// copies ("copy": the event they record, the event the copy stream waits
// for first), a "record" of an event on the compute stream, a host
// "wait" on an event, or a "sync" of both streams, each stamped with the
// number of kernel launches queued before it.
type stageTrace struct {
	op           string
	event, after event
	launches     int
}

// harnessQueue is a Stager's queue on the harness. The harness runs
// everything in order, so the copies are plain writes and the waits
// nothing; what it checks is what a GPU relies on — which event each
// copy waits for and where on the compute stream each event is recorded —
// through the trace.
type harnessQueue struct {
	e      *harnessEngine
	events event
	// recorded is the trace index of each event's latest record: the
	// harness's clock for elapsed, one millisecond a trace entry.
	recorded map[event]int
}

type hostBytes struct{ b []byte }

func (h *hostBytes) Bytes() []byte { return h.b }
func (h *hostBytes) Free() error   { h.b = nil; return nil }

func (e *harnessEngine) stageQueue() (stageQueue, error) {
	return &harnessQueue{e: e, recorded: map[event]int{}}, nil
}

func (q *harnessQueue) trace(op string, ev, after event) {
	q.e.mu.Lock()
	defer q.e.mu.Unlock()
	q.e.stage = append(q.e.stage, stageTrace{op: op, event: ev, after: after, launches: q.e.launches})
}

func (q *harnessQueue) alloc(bytes int) (devptr, error) { return q.e.alloc(bytes) }
func (q *harnessQueue) free(p devptr) error             { return q.e.free(p) }
func (q *harnessQueue) pinned(n int) (pinnedMem, error) { return &hostBytes{b: make([]byte, n)}, nil }
func (q *harnessQueue) destroyEvent(event) error        { return nil }
func (q *harnessQueue) close() error                    { return nil }

func (q *harnessQueue) newEvent(bool) (event, error) {
	q.events++
	return q.events, nil
}

func (q *harnessQueue) copyUp(after, done event, src pinnedMem, copies []stageCopy) error {
	for _, c := range copies {
		if err := q.e.upload(c.Dst, src.Bytes()[c.Off:c.Off+c.N]); err != nil {
			return err
		}
	}
	q.trace("copy", done, after)
	return nil
}

func (q *harnessQueue) copyDown(dst pinnedMem, src devptr, n int, done event) error {
	if err := q.e.download(dst.Bytes()[:n], src); err != nil {
		return err
	}
	q.recorded[done] = len(q.e.stage)
	q.trace("down", done, 0)
	return nil
}

func (q *harnessQueue) record(e event) error {
	q.recorded[e] = len(q.e.stage)
	q.trace("record", e, 0)
	return nil
}

func (q *harnessQueue) elapsed(start, end event) (time.Duration, error) {
	q.trace("elapsed", end, start)
	return time.Duration(q.recorded[end]-q.recorded[start]) * time.Millisecond, nil
}

func (q *harnessQueue) syncEvent(e event) error {
	q.trace("wait", e, 0)
	return nil
}

func (q *harnessQueue) syncAll() error {
	q.trace("sync", 0, 0)
	return q.e.sync()
}

// harnessPtr writes a device address as the harness reads it: pID+OFF.
func harnessPtr(x devptr) string { return fmt.Sprintf("p%d+%d", uint64(x)>>32, uint64(x)&0xffffffff) }

// writeGemm writes the harness's gemm command: g as cuBLAS receives it.
func writeGemm(w io.Writer, g backend.Gemm, a, b, c devptr) error {
	cm, err := toColMajor(g)
	if err != nil {
		return err
	}
	ops := [2]devptr{a, b}
	b01 := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	_, err = fmt.Fprintf(w, "gemm %d %d %d %d %d %x %x %d %s %d %d %s %d %d %s %d %d\n",
		b01(cm.transA), b01(cm.transB), cm.m, cm.n, cm.k, math.Float32bits(g.Alpha), math.Float32bits(g.Beta), cm.batch,
		harnessPtr(ops[cm.a]), cm.lda, cm.strideA, harnessPtr(ops[cm.b]), cm.ldb, cm.strideB, harnessPtr(c), cm.ldc, cm.strid)
	return err
}

// writeLaunch writes the harness's launch command for one kernel launch.
func writeLaunch(w io.Writer, k kernel, grid, block dim3, args []arg) error {
	var b strings.Builder
	fmt.Fprintf(&b, "launch %s %d %d %d %d %d %d %d", k, grid.x, grid.y, grid.z, block.x, block.y, block.z, len(args))
	for _, a := range args {
		switch a.Kind() {
		case cudalaunch.Pointer:
			fmt.Fprintf(&b, " p%d+%d", a.Bits()>>32, a.Bits()&0xffffffff)
		case cudalaunch.Int32:
			fmt.Fprintf(&b, " i%d", int32(a.Bits()))
		case cudalaunch.Int64:
			fmt.Fprintf(&b, " l%d", int64(a.Bits()))
		case cudalaunch.Float32:
			fmt.Fprintf(&b, " f%x", uint32(a.Bits()))
		case cudalaunch.Struct:
			fmt.Fprintf(&b, " s%x", a.Bytes())
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}
