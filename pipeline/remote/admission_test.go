package remote

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/segpipe/segpipe/pipeline"
)

// doGet sends a raw ticket and returns the status of the first message.
func doGet(t *testing.T, c *Client, ticket string) error {
	t.Helper()
	st, err := c.fc.DoGet(context.Background(), &flight.Ticket{Ticket: []byte(ticket)})
	if err == nil {
		_, err = st.Recv()
	}
	return err
}

// Issue 16: this one valid ticket made the server allocate a 64 GiB image
// buffer and die with every other stream. It is refused before the loader
// exists, and the server goes on serving.
func TestOversizedRequestIsRefusedNotFatal(t *testing.T) {
	rows := synthRows(t, 16)
	srv := startServer(t, rows, ServerConfig{MaxMemory: 4 << 30})
	c := client(t, ClientConfig{Addr: srv.addr, Retries: -1})
	err := doGet(t, c, `{"version":1,"shards":"synth","batch_size":64,"imgsz":16384,"limit":1}`)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "imgsz 16384") {
		t.Fatalf("oversized request: %v, want FailedPrecondition naming the request", err)
	}
	s, err := c.Stream(context.Background(), Request{Shards: "synth", BatchSize: 4, ImgSz: 64, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	release(drain(t, s))
	s.Close()
}

func TestAdmissionLimitsAndReadiness(t *testing.T) {
	rows := synthRows(t, 32)
	small := Request{Version: RequestVersion, Shards: "synth", BatchSize: 4, ImgSz: 64, Epochs: 1000}
	base := pipeline.Config{Workers: 1, Prefetch: 2, CacheBytes: 1 << 20}
	cfg, err := small.Config(base)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cfg.MemoryOf(&pipeline.SliceSource{Rows: rows, BlockSize: 8}) // what the server judges by
	if err != nil {
		t.Fatal(err)
	}
	// Room for two streams of one shard set (one cache between them) and
	// not for a third, nor for a second shard set's cache.
	stream := streamBytes(m)
	budget := pipeline.Budget(2*stream + pipeline.CacheMemory(base.CacheBytes) + stream/2)
	srv := startServer(t, rows, ServerConfig{
		MaxMemory: budget, MaxStreams: 3, Loader: base,
		Open: func(_ context.Context, name string) (pipeline.Source, error) {
			return &pipeline.SliceSource{Rows: rows, BlockSize: 8}, nil
		},
	})
	h := httptest.NewServer(srv.HealthHandler())
	defer h.Close()
	probe := func(path string) int {
		resp, err := http.Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if probe("/healthz") != 200 {
		t.Fatal("idle server not healthy")
	}
	if probe("/readyz") != http.StatusServiceUnavailable {
		t.Error("/readyz ready although a default request (batch 32 at 640) exceeds the budget")
	}
	c := client(t, ClientConfig{Addr: srv.addr, Retries: -1})
	ctx, cancel := context.WithCancel(context.Background())
	var open []*Stream
	for i := 0; i < 2; i++ {
		s, err := c.Stream(ctx, small)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		rec.Release()
		open = append(open, s)
	}
	if n := srv.ActiveStreams(); n != 2 {
		t.Fatalf("%d active streams", n)
	}
	if err := doGet(t, c, string(small.Marshal())); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-memory") {
		t.Errorf("third stream: %v, want ResourceExhausted over the memory budget", err)
	}
	other := small
	other.Shards = "other"
	if err := doGet(t, c, string(other.Marshal())); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("stream of a second shard set: %v, want ResourceExhausted (its cache does not fit)", err)
	}
	if probe("/readyz") != http.StatusServiceUnavailable {
		t.Error("/readyz ready while a default stream cannot be admitted")
	}
	if probe("/healthz") != 200 {
		t.Error("/healthz failed while the server is busy")
	}
	if got := srv.adm.caches["synth"]; got == nil || got.refs != 2 {
		t.Errorf("the two streams of one set do not share one cache: %+v", got)
	}
	cancel()
	for _, s := range open {
		s.Close()
	}
	eventually(t, "budget returned", 5e9, func() bool {
		srv.adm.mu.Lock()
		defer srv.adm.mu.Unlock()
		return srv.adm.used == 0 && srv.adm.streams == 0 && len(srv.adm.caches) == 0
	})
	if probe("/readyz") != 200 {
		t.Error("/readyz not ready after the streams ended")
	}
}

// fullServer starts a server of one stream at most and a client of cfg
// (its Addr set), and opens a stream that runs until closed, its first
// batch read: the server is full until the returned stream is closed.
func fullServer(t *testing.T, cfg ClientConfig) (*Client, *Stream) {
	t.Helper()
	srv := startServer(t, synthRows(t, 16), ServerConfig{MaxStreams: 1, Loader: pipelineConfig(1)})
	cfg.Addr = srv.addr
	c := client(t, cfg)
	long := testRequest()
	long.Epochs = 1000
	first, err := c.Stream(context.Background(), long)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Close() })
	rec, err := first.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
	return c, first
}

func TestStreamLimit(t *testing.T) {
	c, _ := fullServer(t, ClientConfig{Retries: -1})
	err := doGet(t, c, string(testRequest().Marshal()))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams 1") {
		t.Fatalf("second stream: %v, want ResourceExhausted naming --max-streams", err)
	}
}

func TestIdleServerIsReady(t *testing.T) {
	srv := startServer(t, synthRows(t, 4), ServerConfig{MaxMemory: 64 << 30})
	rec := httptest.NewRecorder()
	srv.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 || !strings.HasPrefix(rec.Body.String(), "ready") {
		t.Errorf("/readyz: %d %q", rec.Code, rec.Body.String())
	}
}

// Issue 30: a request whose own estimate exceeds the whole budget was sent
// as ResourceExhausted with the text "bad request", and the Go client
// tried it again (on the next server of a fleet, and on every reconnect).
// It can never fit: FailedPrecondition, which no client retries, and a
// text that says it is over the memory budget. A server busy now still
// answers ResourceExhausted, which clients retry.
func TestRequestThatCanNeverFitIsNotRetried(t *testing.T) {
	rows := synthRows(t, 16)
	var srvs []*testServer
	for range 2 {
		srvs = append(srvs, startServer(t, rows, ServerConfig{MaxMemory: 64 << 20, Loader: pipeline.Config{CacheBytes: 1 << 20}}))
	}
	huge := Request{Version: RequestVersion, Shards: "synth", BatchSize: 64, ImgSz: 1024, Limit: 1}

	err := doGet(t, client(t, ClientConfig{Addr: srvs[0].addr, Retries: -1}), string(huge.Marshal()))
	if status.Code(err) != codes.FailedPrecondition || retryable(err) {
		t.Errorf("request over the whole budget: %v (retryable %v), want FailedPrecondition, not retryable", err, retryable(err))
	}
	if msg := status.Convert(err).Message(); strings.Contains(msg, "bad request") || !strings.Contains(msg, "memory budget") || !strings.Contains(msg, "--max-memory") {
		t.Errorf("refusal %q: want it to say the request is over the memory budget (--max-memory), not a bad request", msg)
	}

	// Through a fleet client that retries: one refusal in all.
	c := client(t, ClientConfig{Addr: fleetAddr(srvs), Retries: 3, Backoff: time.Millisecond})
	if _, err := c.Stream(context.Background(), huge); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("fleet stream: %v, want FailedPrecondition", err)
	}
	var refused float64
	for _, s := range srvs {
		refused += testutil.ToFloat64(s.m.refused.WithLabelValues("memory"))
	}
	if refused != 2 { // the direct DoGet above, and the fleet's one try
		t.Errorf("%v memory refusals over the fleet, want 2: the client retried a request that can never fit", refused)
	}

	// Busy now: room for one small stream only.
	small := Request{Version: RequestVersion, Shards: "synth", BatchSize: 2, ImgSz: 64, Epochs: 1000}
	base := pipeline.Config{Workers: 1, CacheBytes: 1 << 20}
	cfg, err := small.Config(base)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cfg.MemoryOf(&pipeline.SliceSource{Rows: rows, BlockSize: 8}) // what the server judges by
	if err != nil {
		t.Fatal(err)
	}
	busy := startServer(t, rows, ServerConfig{MaxMemory: pipeline.Budget(streamBytes(m) + pipeline.CacheMemory(base.CacheBytes) + streamBytes(m)/2), Loader: base})
	bc := client(t, ClientConfig{Addr: busy.addr, Retries: -1})
	s, err := bc.Stream(context.Background(), small)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := doGet(t, bc, string(small.Marshal())); status.Code(err) != codes.ResourceExhausted || !retryable(err) {
		t.Errorf("second stream on a busy server: %v, want ResourceExhausted, retryable", err)
	}
}

// TestRefusedOpenWaitsItsTurn: a stream opened while the server is at its
// stream limit is not an error: the client waits with backoff, as for a
// dropped stream, and streams once the running one has ended.
func TestRefusedOpenWaitsItsTurn(t *testing.T) {
	// One retry: refusals are waited through, not counted as failures.
	c, first := fullServer(t, ClientConfig{Retries: 1, Backoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	ctx := context.Background()
	second, err := c.Stream(ctx, testRequest())
	if err != nil {
		t.Fatalf("opening beside a full server: %v, want a stream that waits its turn", err)
	}
	defer second.Close()
	go func() {
		time.Sleep(200 * time.Millisecond)
		first.Close() // the running stream ends; the second is admitted
	}()
	n := 0
	for {
		rec, err := second.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d batches: %v", n, err)
		}
		rec.Release()
		n++
	}
	if n == 0 {
		t.Fatal("the waiting stream delivered nothing")
	}
}

// TestAdmissionWaitEnds: a stream refused for longer than its
// AdmissionWait fails, saying so.
func TestAdmissionWaitEnds(t *testing.T) {
	c, _ := fullServer(t, ClientConfig{Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, AdmissionWait: 100 * time.Millisecond})
	ctx := context.Background()
	second, err := c.Stream(ctx, testRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := second.Next(ctx); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "refused for") {
		t.Fatalf("Next after the admission wait: %v, want the refusal, named", err)
	}
}
