package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// soakFigures is what TestSoak measures (BENCHMARKS.md quotes them).
type soakFigures struct {
	Seconds          float64 `json:"seconds"`
	Clients          int     `json:"clients"`
	MaxStreams       int     `json:"max_streams"`
	Streams          int64   `json:"streams_started"`
	Batches          int64   `json:"batches"`
	Cancelled        int64   `json:"cancelled"`
	Dropped          int64   `json:"connections_dropped"`
	Refused          int64   `json:"refused"`
	PeakActive       int64   `json:"peak_active_streams"`
	BaseRSSMiB       float64 `json:"base_rss_mib"`
	PeakRSSMiB       float64 `json:"peak_rss_mib"`
	PeakRSSPerStream float64 `json:"peak_rss_mib_per_stream"`
	DrainSeconds     float64 `json:"drain_s"`
	AfterRSSMiB      float64 `json:"rss_after_drain_mib"`
}

// rssMiB reads VmRSS of process pid ("self" for this one).
func rssMiB(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// TestSoak runs 32 clients against one server process for
// SEGPIPE_SOAK_SECONDS (default 20; CI runs 60 under -race) on loopback: streams of random length,
// a third cancelled mid-stream, a third whose connection is dropped with
// batches in flight, one slow consumer, more clients than the server's
// stream limit so that some are refused. The server runs in a child
// process (this test binary, TestSoakServerProcess) so that its memory is
// measured apart from the clients'. It asserts that surviving streams see
// no error, the server's memory stays bounded, and once the clients stop,
// every stream, gauge, reservation and goroutine of the server is gone.
// SEGPIPE_SOAK_OUT names a file for the figures as JSON;
// SEGPIPE_SOAK_KEEP_MEMORY=1 measures the baseline of a server that does
// not return memory to the OS when its last stream ends.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test: a minute of load")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc for the server's memory")
	}
	secs := 20.0
	if v := os.Getenv("SEGPIPE_SOAK_SECONDS"); v != "" {
		var err error
		if secs, err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatal(err)
		}
	}
	const clients, maxStreams = 32, 24
	srv := startSoakServer(t, maxStreams)
	baseGoroutines := srv.metric(t, "go_goroutines")
	fig := soakFigures{Seconds: secs, Clients: clients, MaxStreams: maxStreams, BaseRSSMiB: rssMiB(srv.pid)}
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	var streams, batches, cancelled, dropped, refused, peakActive atomic.Int64
	var failMu sync.Mutex
	var failures []string
	fail := func(format string, err error) {
		failMu.Lock()
		defer failMu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, format+": "+err.Error())
		}
	}
	stop := make(chan struct{})
	var peakRSS atomic.Int64
	sampled := make(chan struct{})
	stopSampler := sync.OnceFunc(func() { close(stop); <-sampled })
	// The sampler must be gone before the test ends, however it ends: it
	// reports through t.
	defer stopSampler()
	go func() { // sampler
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if r := int64(rssMiB(srv.pid)); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			if a := int64(srv.metric(t, "segpipe_serve_active_streams")); a > peakActive.Load() {
				peakActive.Store(a)
			}
		}
	}()
	var wg sync.WaitGroup
	for id := 0; id < clients; id++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(id), 16))
			slow := id == 0
			for time.Now().Before(deadline) {
				c, err := NewClient(ClientConfig{Addr: srv.addr, WindowBytes: 1 << 20, Retries: -1})
				if err != nil {
					fail("client", err)
					return
				}
				req := testRequest()
				req.Epochs, req.ImgSz, req.BatchSize = 1000, 128, 4
				req.Start.Seed = uint64(id)
				if id%2 == 1 {
					req.Masks = MasksWindowed
				}
				ctx, cancel := context.WithCancel(context.Background())
				s, err := c.Stream(ctx, req)
				if err == nil {
					streams.Add(1)
					want := 1 + rng.IntN(20)
					chaos := rng.IntN(3) // 0: cancel, 1: drop the connection, 2: read to the end
					for k := 0; k < want; k++ {
						if slow {
							time.Sleep(40 * time.Millisecond)
						}
						rec, err := s.Next(ctx)
						if err != nil {
							if status.Code(errors.Unwrap(err)) == codes.ResourceExhausted || strings.Contains(err.Error(), "ResourceExhausted") {
								refused.Add(1)
								time.Sleep(20 * time.Millisecond)
							} else {
								fail("stream", err)
							}
							break
						}
						batches.Add(1)
						rec.Release()
						if chaos < 2 && k == want/2 {
							break
						}
					}
					switch chaos {
					case 0:
						cancelled.Add(1)
						cancel()
						s.Close()
						c.Close()
					case 1:
						dropped.Add(1)
						c.Close()
						cancel()
					default:
						s.Close()
						cancel()
						c.Close()
					}
				} else {
					if strings.Contains(err.Error(), "ResourceExhausted") {
						refused.Add(1)
						time.Sleep(20 * time.Millisecond)
					} else {
						fail("open", err)
					}
					cancel()
					c.Close()
				}
			}
		}(id)
	}
	wg.Wait()
	t0 := time.Now()
	var active, held float64
	var ready string
	eventually(t, "server drained", 30*time.Second, func() bool {
		active, held = srv.metric(t, "segpipe_serve_active_streams"), srv.metric(t, "segpipe_serve_transport_batches")
		ready = srv.ready(t)
		return active == 0 && held == 0 && strings.HasPrefix(ready, "ready: 0 streams, 0 B ")
	}, func() string {
		return fmt.Sprintf("active streams %v, transport batches %v, readyz %q; the server's goroutines:\n%s",
			active, held, strings.TrimSpace(ready), srv.goroutines())
	})
	fig.DrainSeconds = time.Since(t0).Seconds()
	stopSampler()
	var goroutines float64
	eventually(t, "server goroutines back to the baseline", 30*time.Second, func() bool {
		goroutines = srv.metric(t, "go_goroutines")
		return goroutines <= baseGoroutines+2
	}, func() string {
		return fmt.Sprintf("%v goroutines, %v at the start:\n%s", goroutines, baseGoroutines, srv.goroutines())
	})
	// The server returns memory to the OS when its last stream ends.
	time.Sleep(time.Second)
	fig.AfterRSSMiB = rssMiB(srv.pid)
	if n := srv.metric(t, `segpipe_serve_refused_total{reason="streams"}`); int64(n) < refused.Load() {
		t.Errorf("server counted %v refusals, clients saw %d", n, refused.Load())
	}
	fig.Streams, fig.Batches, fig.Cancelled, fig.Dropped, fig.Refused = streams.Load(), batches.Load(), cancelled.Load(), dropped.Load(), refused.Load()
	fig.PeakActive, fig.PeakRSSMiB = peakActive.Load(), float64(peakRSS.Load())
	if fig.PeakActive > 0 {
		fig.PeakRSSPerStream = (fig.PeakRSSMiB - fig.BaseRSSMiB) / float64(fig.PeakActive)
	}
	b, _ := json.MarshalIndent(fig, "", "  ")
	t.Logf("soak figures:\n%s", b)
	if p := os.Getenv("SEGPIPE_SOAK_OUT"); p != "" {
		os.WriteFile(p, append(b, '\n'), 0o644)
	}
	for _, f := range failures {
		t.Error(f)
	}
	if fig.PeakActive > maxStreams {
		t.Errorf("%d streams ran at once, over the limit of %d", fig.PeakActive, maxStreams)
	}
	if fig.Streams == 0 || fig.Batches == 0 {
		t.Errorf("no work done: %+v", fig)
	}
	// Bounded: a stream's loader holds a few batches of 4 × 128² images
	// and its HTTP/2 window (1 MiB); 64 MiB a stream would be a leak.
	if fig.PeakActive > 0 && fig.PeakRSSPerStream > 64 {
		t.Errorf("peak RSS %.0f MiB a stream (%.0f MiB at %d streams)", fig.PeakRSSPerStream, fig.PeakRSSMiB, fig.PeakActive)
	}
}

type soakServer struct {
	addr, http, pid string
}

// startSoakServer runs TestSoakServerProcess in a child process.
func startSoakServer(t *testing.T, maxStreams int) *soakServer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSoakServerProcess$")
	cmd.Env = append(os.Environ(), "SEGPIPE_SOAK_CHILD="+strconv.Itoa(maxStreams))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the child stops when its stdin closes
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "SOAK-SERVER" {
			go io.Copy(io.Discard, stdout)
			return &soakServer{addr: f[1], http: f[2], pid: strconv.Itoa(cmd.Process.Pid)}
		}
	}
	t.Fatalf("soak server did not start: %v", sc.Err())
	return nil
}

// metric reads one series of the server's /metrics (0 when absent).
func (s *soakServer) metric(t *testing.T, series string) float64 {
	resp, err := http.Get("http://" + s.http + "/metrics")
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// goroutines is the server's goroutine dump, for a failure that names
// what did not stop.
func (s *soakServer) goroutines() string {
	resp, err := http.Get("http://" + s.http + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func (s *soakServer) ready(t *testing.T) string {
	resp, err := http.Get("http://" + s.http + "/readyz")
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestSoakServerProcess is the server of TestSoak, run in a child process.
func TestSoakServerProcess(t *testing.T) {
	v := os.Getenv("SEGPIPE_SOAK_CHILD")
	if v == "" {
		t.Skip("the server process of TestSoak")
	}
	maxStreams, _ := strconv.Atoi(v)
	srv := startServer(t, synthRows(t, 64), ServerConfig{MaxStreams: maxStreams, WindowBytes: 1 << 20, Loader: pipelineConfig(1)})
	if os.Getenv("SEGPIPE_SOAK_KEEP_MEMORY") != "" {
		srv.adm.freeOS = func() {} // the baseline: leave returning memory to the runtime's pace
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", srv.MetricsHandler())
	mux.Handle("/readyz", srv.HealthHandler())
	mux.Handle("/debug/pprof/goroutine", pprof.Handler("goroutine"))
	hs := &http.Server{Handler: mux}
	go hs.Serve(lis)
	defer hs.Close()
	fmt.Printf("SOAK-SERVER %s %s\n", srv.addr, lis.Addr())
	io.Copy(io.Discard, os.Stdin)
}
