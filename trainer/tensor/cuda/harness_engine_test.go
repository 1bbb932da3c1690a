package cuda

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"testing"
)

// harnessEngine is the engine of a Backend over the CPU harness: a
// harness process driven over pipes, its buffers numbered (a Ptr is
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

// newHarnessBackend starts a harness process and returns a Backend on it
// (or skips the test where g++ is missing). The process ends with the test.
func newHarnessBackend(t *testing.T) (*Backend, *harnessEngine) {
	t.Helper()
	bin := buildHarness(t)
	e := &harnessEngine{live: map[uint64]int{}}
	e.cmd = exec.Command(bin)
	e.cmd.Stderr = &e.stderr
	var err error
	if e.in, err = e.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := e.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.w, e.r = bufio.NewWriterSize(e.in, 1<<16), bufio.NewReaderSize(out, 1<<16)
	// Three blocks of 32 threads at most: grid-stride and per-channel
	// loops go round, and the harness's barriers stay cheap.
	// Tiles of 256 elements send a model's batch-norms at 64 px through
	// the tiled kernels as they go at 640 px on a GPU (TestBackendOnHarness
	// sets other tile lengths for its small channels).
	be := newBackend(e, &Kernels{l: e, maxBlocks: 3, threads: 32, bnTile: 256})
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	})
	return be, e
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

func (e *harnessEngine) alloc(bytes int) (Ptr, error) {
	var p Ptr
	err := e.do(func() error {
		e.next++
		e.live[e.next] = bytes
		p = Ptr(e.next << 32)
		_, err := fmt.Fprintf(e.w, "alloc %d %d\n", e.next, bytes)
		return err
	})
	return p, err
}

func (e *harnessEngine) free(p Ptr) error {
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

func (e *harnessEngine) upload(dst Ptr, src []byte) error {
	return e.do(func() error {
		if _, err := fmt.Fprintf(e.w, "write %d %d %d\n", uint64(dst)>>32, uint64(dst)&0xffffffff, len(src)); err != nil {
			return err
		}
		_, err := e.w.Write(src)
		return err
	})
}

func (e *harnessEngine) download(dst []byte, src Ptr) error {
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

func (e *harnessEngine) gemm(g Gemm, a, b, c Ptr) error {
	return e.do(func() error { return writeGemm(e.w, g, a, b, c) })
}

// planConv stands in for cuDNN's algorithm search: a plan with no
// descriptors, counted so that tests see the Backend's cache work.
func (e *harnessEngine) planConv(c Conv) (*ConvPlan, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.plans++
	return &ConvPlan{Conv: c}, nil
}

func (e *harnessEngine) conv(pass string, p *ConvPlan, a, b, c Ptr) error {
	return e.do(func() error {
		e.convs++
		cv := p.Conv
		_, err := fmt.Fprintf(e.w, "conv %s %d %d %d %d %d %d %d %d %d %d %s %s %s\n", pass, cv.N, cv.InC, cv.InH, cv.InW,
			cv.OutC, cv.KH, cv.KW, cv.Stride, cv.Pad, cv.Groups, harnessPtr(a), harnessPtr(b), harnessPtr(c))
		return err
	})
}

func (e *harnessEngine) convForward(p *ConvPlan, x, w, y Ptr) error { return e.conv("f", p, x, w, y) }
func (e *harnessEngine) convBackwardData(p *ConvPlan, dy, w, dx Ptr) error {
	return e.conv("d", p, dy, w, dx)
}
func (e *harnessEngine) convBackwardFilter(p *ConvPlan, x, dy, dw Ptr) error {
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
