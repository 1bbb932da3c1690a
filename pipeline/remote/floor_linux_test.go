package remote

import (
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSocketFloor is the receiving CPU no TCP client can go below:
// one b32@640 dense batch's bytes (40 MiB) read from a loopback socket into
// one reused buffer, nothing parsed, the reading thread's CPU time alone
// (RUSAGE_THREAD; the sender is another goroutine, on another core given
// two). BenchmarkClientServed's cpu-ms/batch is the same quantity for the
// gRPC client, so the pair says how far the client is from the kernel's
// own copy:
//
//	go test ./pipeline/remote -run '^$' -bench SocketFloor -benchtime 30x
//
// read-16KiB reads one HTTP/2 DATA frame's payload per call, as gRPC's
// framer would without its read buffer.
func BenchmarkSocketFloor(b *testing.B) {
	const batchBytes = 40 << 20
	for _, tc := range []struct {
		name string
		read int
	}{{"read-1MiB", 1 << 20}, {"read-16KiB", maxFrame}} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			stop := make(chan struct{})
			sent := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					sent <- err
					return
				}
				defer c.Close()
				src := make([]byte, 4<<20)
				for i := range src {
					src[i] = byte(i)
				}
				for {
					select {
					case <-stop:
						sent <- nil
						return
					default:
					}
					if _, err := c.Write(src); err != nil {
						sent <- nil // the reader closed
						return
					}
				}
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			dst := make([]byte, batchBytes)
			readBatch := func() {
				for off := 0; off < len(dst); {
					n, err := c.Read(dst[off:min(off+tc.read, len(dst))])
					if err != nil && err != io.EOF {
						b.Fatal(err)
					}
					off += n
				}
			}
			readBatch() // connection and socket buffers warm
			t0 := threadCPU()
			n := 0
			for b.Loop() {
				readBatch()
				n++
			}
			b.ReportMetric(float64(threadCPU()-t0)/1e6/float64(n), "cpu-ms/batch")
			close(stop)
			c.Close()
			if err := <-sent; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// threadCPU is the calling thread's user+system CPU time.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minorFaults is the process's minor page faults so far: memory the
// kernel maps (and clears) on first touch, a cost a receive path that
// reuses its buffers does not pay.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}
