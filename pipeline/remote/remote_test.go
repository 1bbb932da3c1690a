package remote

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

func TestParseRequestRejects(t *testing.T) {
	for _, tc := range []struct {
		name, ticket, want string
	}{
		{"not json", `hello`, "not a version 1"},
		{"unknown field", `{"version":1,"shards":"s","batchsize":4}`, `unknown field "batchsize"`},
		{"unknown augment field", `{"version":1,"augment":{"mosaik":1}}`, `unknown field "mosaik"`},
		{"no version", `{"shards":"s"}`, "version 0"},
		{"future version", `{"version":2}`, "version 2"},
		{"trailing data", `{"version":1} {"version":1}`, "trailing data"},
		{"wrong type", `{"version":1,"batch_size":"32"}`, "batch_size"},
		{"masks", `{"version":1,"masks":"rle"}`, `masks "rle"`},
		{"escape root", `{"version":1,"shards":"a/../../etc"}`, "leaves the shard root"},
		{"absolute", `{"version":1,"shards":"/etc"}`, "relative"},
		{"rank", `{"version":1,"rank":4,"world_size":4}`, "rank 4 of world size 4"},
		{"imgsz", `{"version":1,"imgsz":66}`, "not a multiple of the mask stride"},
		{"augment range", `{"version":1,"augment":{"mosaic":2}}`, "mosaic 2 out of range"},
		{"negative", `{"version":1,"batch_size":-1}`, "negative"},
		{"limit", `{"version":1,"limit":-1}`, "limit -1"},
		{"epochs before start", `{"version":1,"start":{"seed":1,"epoch":3,"consumed":0},"epochs":3}`, "epochs 3 leaves nothing"},
		{"huge batch", `{"version":1,"batch_size":100000}`, "batch size 100000"},
		{"start", `{"version":1,"start":{"seed":1,"epoch":0,"consumed":-5}}`, "start state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tc.ticket))
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrBadRequest mentioning %q", err, tc.want)
			}
		})
	}
	r, err := ParseRequest(testRequest().Marshal())
	if err != nil || r.Shards != "synth" || r.Augment == nil || r.Augment.Degrees != 5 {
		t.Fatalf("round trip: %+v, %v", r, err)
	}
}

func TestMalformedTicketsOverFlight(t *testing.T) {
	srv := startServer(t, synthRows(t, 8), ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	for _, tk := range []string{``, `{`, `{"version":1,"shards":"synth","extra":true}`, `{"version":1,"shards":"nope"}`} {
		st, err := c.fc.DoGet(context.Background(), &flight.Ticket{Ticket: []byte(tk)})
		if err == nil {
			_, err = st.Recv()
		}
		code := status.Code(err)
		if code != codes.InvalidArgument && code != codes.NotFound {
			t.Errorf("ticket %q: %v, want InvalidArgument or NotFound", tk, err)
		}
	}
	if _, err := c.Info(context.Background(), Request{Shards: "synth", ImgSz: 63}); status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
		t.Errorf("bad descriptor: %v", err)
	}
	if srv.ActiveStreams() != 0 {
		t.Errorf("%d streams active after refusals", srv.ActiveStreams())
	}
}

func TestRoundTripByteIdentical(t *testing.T) {
	rows := synthRows(t, 24)
	srv := startServer(t, rows, ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	for _, masks := range []string{MasksDense, MasksWindowed} {
		t.Run(masks, func(t *testing.T) {
			req := testRequest()
			req.Masks = masks
			want := local(t, rows, req, 1)
			defer release(want)
			s, err := c.Stream(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got := drain(t, s)
			defer release(got)
			if st := s.State(); st != (order.State{Seed: 7, Epoch: 2}) {
				t.Errorf("final state %+v", st)
			}
			s.Close()
			sameBatches(t, want, got)
		})
	}
}

func TestFlightInfo(t *testing.T) {
	srv := startServer(t, synthRows(t, 8), ServerConfig{Peers: []string{"grpc://10.0.0.1:8815", "grpc://10.0.0.2:8815"}})
	c := client(t, ClientConfig{Addr: srv.addr})
	req := testRequest()
	req.Rank, req.WorldSize, req.Masks = 3, 4, MasksWindowed
	info, err := c.Info(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := flight.DeserializeSchema(info.Schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSchema(sc, MasksWindowed, false); err != nil {
		t.Error(err)
	}
	if len(info.Endpoint) != 1 || info.Endpoint[0].Location[0].Uri != "grpc://10.0.0.2:8815" {
		t.Errorf("endpoint %v, want rank 3 at the second peer", info.Endpoint)
	}
	if r, err := ParseRequest(info.Endpoint[0].Ticket.Ticket); err != nil || r.Rank != 3 {
		t.Errorf("endpoint ticket %s: %v", info.Endpoint[0].Ticket.Ticket, err)
	}
}

func TestAuthRefusal(t *testing.T) {
	rows := synthRows(t, 8)
	srv := startServer(t, rows, ServerConfig{Token: "s3cret"})
	req := testRequest()
	req.Limit = 1
	for _, tok := range []string{"", "wrong", "s3cret-but-longer"} {
		c := client(t, ClientConfig{Addr: srv.addr, Token: tok})
		if _, err := c.Stream(context.Background(), req); status.Code(errors.Unwrap(err)) != codes.Unauthenticated {
			t.Errorf("token %q: %v, want Unauthenticated", tok, err)
		}
		if _, err := c.Info(context.Background(), req); status.Code(errors.Unwrap(err)) != codes.Unauthenticated {
			t.Errorf("token %q: info: %v, want Unauthenticated", tok, err)
		}
	}
	c := client(t, ClientConfig{Addr: srv.addr, Token: "s3cret"})
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	release(drain(t, s))
	s.Close()
}

func TestListenLoopbackOnlyWithoutToken(t *testing.T) {
	if _, err := Listen("0.0.0.0:0", false, false); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("0.0.0.0 without token: %v", err)
	}
	if _, err := Listen(":0", false, false); err == nil {
		t.Errorf(":0 without token accepted")
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		l, err := Listen(addr, false, false)
		if err != nil {
			t.Errorf("%s: %v", addr, err)
			continue
		}
		l.Close()
	}
}

// selfSigned returns a server certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	return selfSignedFor(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
}

// selfSignedFor is a self-signed server certificate for those names and
// addresses, and a pool that trusts it.
func selfSignedFor(t *testing.T, names []string, ips []net.IP) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "segpipe test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: names, IPAddresses: ips, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func TestTLS(t *testing.T) {
	rows := synthRows(t, 8)
	cert, pool := selfSigned(t)
	srv := startServer(t, rows, ServerConfig{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, Token: "t"})
	req := testRequest()
	req.Limit = 2
	want := local(t, rows, req, 1)
	defer release(want)
	c := client(t, ClientConfig{Addr: srv.addr, Token: "t", TLS: &tls.Config{RootCAs: pool}})
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, s)
	defer release(got)
	sameBatches(t, want, got)
	// A client that does not trust the certificate, or speaks plaintext,
	// gets nothing.
	for _, cfg := range []ClientConfig{
		{Addr: srv.addr, Token: "t", TLS: &tls.Config{}, Retries: -1},
		{Addr: srv.addr, Token: "t", Retries: -1},
	} {
		c := client(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := c.Stream(ctx, req); err == nil {
			t.Errorf("TLS=%v: stream opened", cfg.TLS != nil)
		}
		cancel()
	}
}

func TestDisconnectFreesLoader(t *testing.T) {
	rows := synthRows(t, 32)
	srv := startServer(t, rows, ServerConfig{})
	before := runtime.NumGoroutine()
	c, err := NewClient(ClientConfig{Addr: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	req := testRequest()
	req.Epochs = 1000 // far more than the test reads
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if srv.ActiveStreams() != 1 {
		t.Fatalf("%d active streams, want 1", srv.ActiveStreams())
	}
	s.Close()
	eventually(t, "loader freed after the client left", 5*time.Second, func() bool {
		return srv.ActiveStreams() == 0 && srv.TransportBatches() == 0
	})
	c.Close()
	eventually(t, "goroutines back to the baseline", 5*time.Second, func() bool {
		return runtime.NumGoroutine() <= before
	})
}

func TestSlowConsumerBounded(t *testing.T) {
	rows := synthRows(t, 32)
	// Small windows so that the test reaches the steady state quickly; the
	// bound does not depend on them.
	srv := startServer(t, rows, ServerConfig{WindowBytes: 256 << 10, Loader: pipelineConfig(2)})
	c := client(t, ClientConfig{Addr: srv.addr, WindowBytes: 256 << 10})
	req := testRequest()
	req.ImgSz, req.BatchSize, req.Epochs = 256, 4, 100 // 786 KiB of images a batch
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var peak int64
	for i := 0; i < 12; i++ {
		time.Sleep(30 * time.Millisecond) // a consumer slower than the server
		peak = max(peak, srv.TransportBatches())
		rec, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	// One batch being written plus at most one queued behind flow control.
	if peak > 2 {
		t.Errorf("server held %d batches in the transport for a slow client, want ≤ 2", peak)
	}
}

func TestConcurrentClients(t *testing.T) {
	rows := synthRows(t, 64)
	srv := startServer(t, rows, ServerConfig{Loader: pipelineConfig(1)})
	c := client(t, ClientConfig{Addr: srv.addr})
	const world = 32
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, world)
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := testRequest()
			req.Rank, req.WorldSize, req.Epochs, req.BatchSize = r, world, 1, 2
			a := augment.DefaultConfig()
			a.Mosaic = 0
			req.Augment = &a
			if r%2 == 1 {
				req.Masks = MasksWindowed
			}
			s, err := c.Stream(context.Background(), req)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			for {
				rec, err := s.Next(context.Background())
				if err == io.EOF {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				ids := rec.Column(1).Data().Buffers()[1].Bytes()
				mu.Lock()
				for k := 0; k < int(rec.NumRows()); k++ {
					seen[int64(ids[8*k])|int64(ids[8*k+1])<<8]++
				}
				mu.Unlock()
				if _, err := batch.MaskStack(rec); err != nil {
					errs <- err
				}
				rec.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != len(rows) {
		t.Errorf("%d distinct images over %d ranks, want every one of %d once", len(seen), world, len(rows))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("image %d served %d times", id, n)
		}
	}
}

// proxy forwards loopback TCP connections and can cut them all, as a
// network failure would.
type proxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis, target: target}
	go func() {
		for {
			a, err := lis.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				a.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, a, b)
			p.mu.Unlock()
			go func() { io.Copy(a, b); a.Close() }()
			go func() { io.Copy(b, a); b.Close() }()
		}
	}()
	t.Cleanup(func() { lis.Close(); p.cut() })
	return p
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestResumeAfterDroppedConnection(t *testing.T) {
	rows := synthRows(t, 24)
	srv := startServer(t, rows, ServerConfig{})
	px := newProxy(t, srv.addr)
	req := testRequest()
	req.Masks = MasksWindowed
	want := local(t, rows, req, 1)
	defer release(want)
	c := client(t, ClientConfig{Addr: px.lis.Addr().String(), Backoff: 5 * time.Millisecond})
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []arrow.RecordBatch
	for i := 0; ; i++ {
		if i == 2 || i == 5 {
			px.cut()
		}
		rec, err := s.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		got = append(got, rec)
	}
	defer release(got)
	sameBatches(t, want, got)
}

// TestReconnectsThatFail: after the network fails for good, the stream
// says so clearly, whether the retries run out or the caller's deadline
// ends them. The deadline is reported with what it cut short, at once
// when the next wait would pass it, not as a bare "context deadline
// exceeded" when it comes.
func TestReconnectsThatFail(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      ClientConfig
		deadline time.Duration
		want     []string
	}{
		{"retries spent", ClientConfig{Retries: 3, Backoff: time.Millisecond}, 0, []string{"3 reconnect attempts failed"}},
		{"deadline first", ClientConfig{Retries: 1 << 20, Backoff: time.Millisecond, MaxBackoff: 40 * time.Millisecond},
			500 * time.Millisecond, []string{"reconnect attempts, then context deadline exceeded", "Unavailable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := synthRows(t, 8)
			srv := startServer(t, rows, ServerConfig{})
			px := newProxy(t, srv.addr)
			tc.cfg.Addr = px.lis.Addr().String()
			c := client(t, tc.cfg)
			req := testRequest()
			req.Epochs = 1000 // the stream cannot have ended when the network fails
			s, err := c.Stream(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rec, err := s.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			rec.Release()
			px.lis.Close()
			px.cut()
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			// Batches already received are still delivered; then the error.
			for i := 0; err == nil && i < 1000; i++ {
				if rec, err = s.Next(ctx); err == nil {
					rec.Release()
				}
			}
			if err == nil {
				t.Fatal("no error after the network failed")
			}
			if tc.deadline > 0 && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want the deadline", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want %q in it", err, w)
				}
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	rows := synthRows(t, 8)
	srv := startServer(t, rows, ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	req := testRequest()
	req.Limit = 3
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	release(drain(t, s))
	s.Close()
	wants := []string{"segpipe_serve_batches_total 3", "segpipe_serve_images_total 12",
		"segpipe_serve_bytes_sent_total", "segpipe_serve_stall_seconds_total",
		"segpipe_serve_active_streams 0"}
	// The client has its batches before the server's handler returns and
	// settles the stream's figures: wait for them, boundedly.
	var missing []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		w := httptest.NewRecorder()
		srv.MetricsHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		missing = missing[:0]
		for _, want := range wants {
			if !strings.Contains(w.Body.String(), want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, m := range missing {
		t.Errorf("metrics lack %q", m)
	}
}

// Issue 16: transport_batches stayed above zero after cancelled streams
// (4 after 16 cancellations, with no stream active). Half the clients
// cancel their stream, half drop the whole connection, both while the
// server is blocked in flow control in the middle of a batch.
func TestCancelledStreamsReturnTheTransportGauge(t *testing.T) {
	rows := synthRows(t, 32)
	srv := startServer(t, rows, ServerConfig{WindowBytes: 64 << 10, Loader: pipelineConfig(1)})
	req := testRequest()
	req.ImgSz, req.BatchSize, req.Epochs = 256, 4, 1000 // batches far larger than the windows
	for i := 0; i < 16; i++ {
		c, err := NewClient(ClientConfig{Addr: srv.addr, WindowBytes: 64 << 10, Retries: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		s, err := c.Stream(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec.Release()
		time.Sleep(time.Duration(5+i%4*10) * time.Millisecond)
		if i%2 == 0 {
			cancel()
			s.Close()
			c.Close()
		} else {
			c.Close()
			cancel()
		}
	}
	eventually(t, "streams ended", 10*time.Second, func() bool { return srv.ActiveStreams() == 0 })
	eventually(t, "transport gauge back to zero", 5*time.Second, func() bool { return srv.TransportBatches() == 0 })
	if g := gauge(t, srv.Server, "segpipe_serve_transport_batches"); g != 0 {
		t.Errorf("segpipe_serve_transport_batches = %v after every stream ended", g)
	}
}

// gauge reads one series of the server's /metrics.
func gauge(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	g, _ := firstSeries(t, s, name)
	return g
}

// firstSeries reads the first series of a metric of the server's
// /metrics, as a gauge's and a counter's value (the other one 0).
func firstSeries(t *testing.T, s *Server, name string) (gauge, counter float64) {
	t.Helper()
	mfs, err := s.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue(), m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %s", name)
	return 0, 0
}

// deadTransport is a DoGet stream whose connection dies after ok messages.
// It keeps every message it accepted without freeing it, as gRPC does with
// frames still queued when its writer exits, and then fails the send. gRPC
// closes its done channel before it cancels the streams of a dying
// connection, so the context may still be live when DoGet sees the error
// (cancel nil) or already done (cancel called first).
type deadTransport struct {
	flight.FlightService_DoGetServer
	ctx    context.Context
	cancel context.CancelFunc
	ok     int
	kept   []mem.BufferSlice
}

func (d *deadTransport) Context() context.Context { return d.ctx }

func (d *deadTransport) SendMsg(m any) error {
	if len(d.kept) == d.ok {
		if d.cancel != nil {
			d.cancel()
		}
		return status.Error(codes.Unavailable, "transport is closing")
	}
	b, err := newCodec(nil).Marshal(m)
	if err != nil {
		return err
	}
	d.kept = append(d.kept, b)
	return nil
}

func TestDeadTransportSettlesTransportCount(t *testing.T) {
	srv := startServer(t, synthRows(t, 16), ServerConfig{})
	req := testRequest()
	// Images past minRef, so that the messages reference the batches'
	// buffers rather than copy them.
	req.ImgSz, req.Epochs = 256, 1000
	for _, tc := range []struct {
		name      string
		cancelled bool
	}{
		{"send fails, context live", false},
		{"send fails, context cancelled", true},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		d := &deadTransport{ctx: ctx, ok: 4} // the schema and three batches
		if tc.cancelled {
			d.cancel = cancel
		}
		err := srv.DoGet(&flight.Ticket{Ticket: req.Marshal()}, d)
		cancel()
		if err == nil {
			t.Fatalf("%s: DoGet returned no error over a dead transport", tc.name)
		}
		if len(d.kept) != 4 {
			t.Fatalf("%s: %d messages sent, want 4", tc.name, len(d.kept))
		}
		if n := srv.TransportBatches(); n != 0 {
			t.Errorf("%s: %d batches counted as held after the stream ended", tc.name, n)
		}
		// The transport letting go late must not count them a second time.
		for _, b := range d.kept {
			b.Free()
		}
		if n := srv.TransportBatches(); n != 0 {
			t.Errorf("%s: %d batches counted once the transport freed them", tc.name, n)
		}
	}
}

// lastThenSilence serves n batches of the request's one epoch and then
// neither ends nor sends: a connection lost now is lost after the last
// batch but before the stream's end.
type lastThenSilence struct {
	rec  arrow.RecordBatch
	n, k int64
}

func (l *lastThenSilence) Next(ctx context.Context) (arrow.RecordBatch, error) {
	if l.k == l.n {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	l.k++
	l.rec.Retain()
	return l.rec, nil
}

func (l *lastThenSilence) State() order.State {
	if l.k == l.n {
		return order.State{Seed: 7, Epoch: 1}
	}
	return order.State{Seed: 7, Consumed: 4 * l.k}
}

func (l *lastThenSilence) Close() error { return nil }

func TestDropAfterTheLastBatchEndsTheStream(t *testing.T) {
	rec := preparedBatch(t, 4, 64, 2)
	defer rec.Release()
	srv := startServer(t, synthRows(t, 8), ServerConfig{newBatches: func(context.Context, pipeline.Source, pipeline.Config) (pipeline.Batches, error) {
		return &lastThenSilence{rec: rec, n: 3}, nil
	}})
	px := newProxy(t, srv.addr)
	c := client(t, ClientConfig{Addr: px.lis.Addr().String(), Backoff: time.Millisecond})
	s, err := c.Stream(context.Background(), Request{Version: RequestVersion, Shards: "synth", ImgSz: 64, BatchSize: 4,
		Start: order.State{Seed: 7}, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 3; i++ {
		r, err := s.Next(context.Background())
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		r.Release()
	}
	px.cut()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := s.Next(ctx); err != io.EOF {
		if r != nil {
			r.Release()
		}
		t.Fatalf("after the last batch and a dropped connection: %v, want io.EOF", err)
	}
	if st := s.State(); st.Epoch != 1 || s.Delivered() != 3 {
		t.Fatalf("state %+v after %d batches", st, s.Delivered())
	}
}

// Issue 30: "bearer" was refused; RFC 7235 makes the scheme
// case-insensitive. The token itself stays exact.
func TestBearerScheme(t *testing.T) {
	for _, tc := range []struct {
		header string
		ok     bool
	}{
		{"Bearer s3cret", true},
		{"bearer s3cret", true},
		{"BEARER s3cret", true},
		{"Bearer   s3cret", true},
		{"Bearer S3CRET", false},
		{"Bearer s3cret ", false},
		{"Bearers3cret", false},
		{"Basic s3cret", false},
		{"s3cret", false},
		{"Bearer ", false},
		{"", false},
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", tc.header))
		if err := checkToken(ctx, "s3cret"); (err == nil) != tc.ok {
			t.Errorf("authorization %q: %v, want accepted %v", tc.header, err, tc.ok)
		}
	}
}

// Issue 30: the stall series was labelled "IP rank R/W" from the ticket, so
// tickets with different ranks and world sizes made series without bound,
// and none went away. The label is the peer's address alone, and its series
// goes when the last stream from that address ends; the server's total
// stays.
func TestStallSeriesAreBoundedAndRemoved(t *testing.T) {
	srv := startServer(t, synthRows(t, 8), ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	metrics := func() string {
		w := httptest.NewRecorder()
		srv.MetricsHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		return w.Body.String()
	}
	series := func(body string) []string {
		var out []string
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "segpipe_serve_client_stall_seconds_total{") {
				out = append(out, line)
			}
		}
		return out
	}
	// A stream held open: its address has one series.
	held, err := c.Stream(context.Background(), Request{Shards: "synth", BatchSize: 2, ImgSz: 64, Epochs: 100})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := held.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
	for ws := 1; ws <= 12; ws++ {
		req := testRequest()
		req.Rank, req.WorldSize, req.Limit = ws-1, ws, 1
		s, err := c.Stream(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		release(drain(t, s))
		s.Close()
	}
	if got := series(metrics()); len(got) != 1 || !strings.Contains(got[0], `client="127.0.0.1"`) {
		t.Errorf("stall series with one stream open after 12 others of 12 world sizes: %q, want one, labelled by address", got)
	}
	held.Close()
	eventually(t, "held stream ended", 5*time.Second, func() bool { return srv.ActiveStreams() == 0 })
	body := metrics()
	if got := series(body); len(got) != 0 {
		t.Errorf("stall series after every stream ended: %q, want none", got)
	}
	if !strings.Contains(body, "segpipe_serve_stall_seconds_total ") {
		t.Error("metrics lack the server's total stall, segpipe_serve_stall_seconds_total")
	}
}
