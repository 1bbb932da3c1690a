package remote

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// counter reads one unlabelled counter of the server's metrics.
func counter(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	_, c := firstSeries(t, s, name)
	return c
}

// readyz is the status code of the server's /readyz.
func readyz(s *Server) int {
	w := httptest.NewRecorder()
	s.HealthHandler().ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	return w.Code
}

// Issue 35: four clients that stopped reading after one batch held every
// slot of --max-streams 4, and /readyz answered 503, for as long as they
// stayed connected. A stream whose client takes no data for the stall
// timeout is ended: its slot, reservation, loader and goroutine are freed,
// it is counted, and a client that reads again resumes where it stopped
// with the batches it would have had.
func TestStalledReadersFreeTheirSlots(t *testing.T) {
	const clients = 4
	rows := synthRows(t, 32)
	srv := startServer(t, rows, ServerConfig{MaxStreams: clients, StallTimeout: 200 * time.Millisecond, Loader: pipelineConfig(1)})
	base := runtime.NumGoroutine()
	req := testRequest()
	// A batch of 4 × 128² images (196 KiB) is over the clients' 64 KiB
	// window: a client that stops reading stops the server within a few
	// batches, long before the limit.
	req.ImgSz, req.Epochs, req.Limit = 128, 1000, 16
	var logs syncBuf
	streams := make([]*Stream, clients)
	firsts := make([]arrow.RecordBatch, clients)
	for i := range streams {
		c, err := NewClient(ClientConfig{Addr: srv.addr, WindowBytes: 64 << 10, Backoff: time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if streams[i], err = c.Stream(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		defer streams[i].Close()
		if firsts[i], err = streams[i].Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Every client now holds one batch and reads no more.
	eventually(t, "stalled streams ended and their slots freed", 20*time.Second, func() bool {
		srv.adm.mu.Lock()
		admitted, used := srv.adm.streams, srv.adm.used
		srv.adm.mu.Unlock()
		return counter(t, srv.Server, "segpipe_serve_stalled_streams_total") == clients &&
			srv.ActiveStreams() == 0 && srv.TransportBatches() == 0 && admitted == 0 && used == 0 &&
			readyz(srv.Server) == http.StatusOK
	}, func() string {
		return fmt.Sprintf("stalled %v, active %d, transport batches %d, readyz %d",
			counter(t, srv.Server, "segpipe_serve_stalled_streams_total"), srv.ActiveStreams(), srv.TransportBatches(), readyz(srv.Server))
	})

	// A stalled client that reads again resumes: the batches still in its
	// window, then a new stream from the state of the last one.
	got := []arrow.RecordBatch{firsts[0]}
	for int64(len(got)) < req.Limit {
		rec, err := streams[0].Next(context.Background())
		if err != nil {
			t.Fatalf("after %d batches: %v", len(got), err)
		}
		got = append(got, rec)
	}
	defer release(got)
	want := local(t, rows, req, 1)
	defer release(want)
	sameBatches(t, want, got)
	if l := logs.String(); !strings.Contains(l, "reconnecting") || !strings.Contains(l, "no progress for 200ms") {
		t.Errorf("the client's log does not show the stall's status and a reconnect:\n%s", l)
	}

	for i := range streams {
		streams[i].Close()
		if i > 0 {
			firsts[i].Release()
		}
	}
	eventually(t, "resumed stream ended", 10*time.Second, func() bool { return srv.ActiveStreams() == 0 })
	for _, s := range streams {
		s.c.Close()
	}
	eventually(t, "goroutines back to the baseline", 10*time.Second, func() bool {
		return runtime.NumGoroutine() <= base+2
	}, func() string {
		buf := make([]byte, 1<<20)
		return fmt.Sprintf("%d goroutines, %d at the start:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
	})
}

// TestStallStatusIsUnavailableNamingTheTimeout: the stalled stream's own
// status, as a plain Flight client sees it, is Unavailable (a client
// retries it) and says why; a negative timeout never ends a stream.
func TestStallStatusIsUnavailableNamingTheTimeout(t *testing.T) {
	srv := startServer(t, synthRows(t, 16), ServerConfig{StallTimeout: 100 * time.Millisecond, Loader: pipelineConfig(1)})
	c := client(t, ClientConfig{Addr: srv.addr, WindowBytes: 64 << 10})
	req := testRequest()
	req.ImgSz, req.Epochs = 128, 1000
	st, err := c.fc.DoGet(context.Background(), &flight.Ticket{Ticket: req.Marshal()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // the schema; then no reads until the stall has ended the stream
		t.Fatal(err)
	}
	eventually(t, "stream ended by the stall", 10*time.Second, func() bool {
		return counter(t, srv.Server, "segpipe_serve_stalled_streams_total") == 1 && srv.ActiveStreams() == 0
	})
	for {
		if _, err = st.Recv(); err != nil {
			break
		}
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no progress for 100ms") || !retryable(err) {
		t.Errorf("stalled stream ended with %v, want Unavailable saying \"no progress for 100ms\"", err)
	}

	if s := startServer(t, nil, ServerConfig{StallTimeout: -1}); s.cfg.StallTimeout >= 0 {
		t.Errorf("negative stall timeout became %v", s.cfg.StallTimeout)
	}
	if s := startServer(t, nil, ServerConfig{}); s.cfg.StallTimeout != DefaultStallTimeout {
		t.Errorf("default stall timeout %v, want %v", s.cfg.StallTimeout, DefaultStallTimeout)
	}
}

// stallingStream is a DoGet stream whose client never takes the second
// message: that send blocks until the stream's context ends, as gRPC's
// does on a full window.
type stallingStream struct {
	flight.FlightService_DoGetServer
	ctx  context.Context
	sent int
}

func (s *stallingStream) Context() context.Context { return s.ctx }

func (s *stallingStream) SendMsg(m any) error {
	if s.sent == 1 {
		<-s.ctx.Done()
		return status.FromContextError(s.ctx.Err()).Err()
	}
	s.sent++
	return nil
}

// TestNoStallTimeoutWaitsForTheClient: with the guard off, a blocked send
// is ended only by the client (its context), never by the server.
func TestNoStallTimeoutWaitsForTheClient(t *testing.T) {
	srv := startServer(t, synthRows(t, 16), ServerConfig{StallTimeout: -1, Loader: pipelineConfig(1)})
	req := testRequest()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.DoGet(&flight.Ticket{Ticket: req.Marshal()}, &stallingStream{ctx: ctx}) }()
	eventually(t, "stream running", 10*time.Second, func() bool { return srv.ActiveStreams() == 1 })
	select {
	case err := <-done:
		t.Fatalf("stream ended without a stall timeout: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("cancelled stream: %v, want Canceled", err)
	}
	if n := counter(t, srv.Server, "segpipe_serve_stalled_streams_total"); n != 0 {
		t.Errorf("%v streams counted as stalled without a stall timeout", n)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
