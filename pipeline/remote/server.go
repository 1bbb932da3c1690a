package remote

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
)

// DefaultWindowBytes is the HTTP/2 flow-control window of both ends. gRPC
// opens the window as the application reads, so the window bounds how much
// of the next batch travels while the trainer works on the current one:
// 64 MiB holds a whole batch of 32 images at 640² with dense masks. It is
// client memory; the server never holds more than the batches described in
// the package doc.
const DefaultWindowBytes = 64 << 20

// DefaultStallTimeout is ServerConfig.StallTimeout's default. The clock
// runs only while a batch is ready and the client's window is full, that is
// while the trainer already has a batch or more in hand that it has not
// asked for: a training step, however slow, takes seconds, and a checkpoint
// save well under this. A trainer that pauses longer (a long validation
// pass between epochs) only pays a reconnect: segpipe clients resume from
// the state of the last batch they delivered.
const DefaultStallTimeout = 2 * time.Minute

// ServerConfig configures a Server. Zero values take the documented
// defaults.
type ServerConfig struct {
	// Root is the shard root: a request's shard set is a directory below it
	// holding a manifest.json.
	Root string
	// Open, when set, replaces Root: it returns the source of a cleaned
	// shard set name. A returned source that is an io.Closer is closed when
	// its stream ends.
	Open func(ctx context.Context, name string) (pipeline.Source, error)
	// Loader holds the resource settings of every stream's loader
	// (Workers, Prefetch, CacheBytes, WindowRows, Strict, Logger); the
	// request supplies the rest.
	Loader pipeline.Config
	// Token, when set, is required as "authorization: Bearer <token>" on
	// every call.
	Token string
	// TLS, when set, serves over TLS.
	TLS *tls.Config
	// Peers are the locations (grpc://host:port or grpc+tls://...) of the
	// servers that share the ranks of a run, this one included; rank r is
	// routed to Peers[r % len(Peers)] by GetFlightInfo, which lists the
	// others after it for failover. Empty: every endpoint is this server.
	Peers []string
	// MaxMemory is the memory budget of the process: a stream is admitted
	// when pipeline.Budget of the running streams' live memory and its own
	// (its loader's estimate over its shard set without the shared cache,
	// plus one batch being sent, and for the first stream of a shard set
	// that set's cache, pipeline.CacheMemory) fits in it; otherwise DoGet answers ResourceExhausted
	// before allocating (FailedPrecondition when the stream alone is over
	// the whole budget: no retry makes it fit). Default pipeline.DefaultMaxMemory() (half the
	// machine's or the container's memory); negative: no budget.
	MaxMemory int64
	// MaxStreams is the number of streams served at once, default
	// DefaultMaxStreams; one more is refused with ResourceExhausted.
	MaxStreams int
	// PeerSource, when set, replaces Peers and is asked on every
	// GetFlightInfo (DNSPeers finds the servers behind a DNS name).
	PeerSource func(ctx context.Context) ([]string, error)
	// WindowBytes is the HTTP/2 stream and connection window, default
	// DefaultWindowBytes.
	WindowBytes int32
	// StallTimeout ends a stream whose client takes no data for this long:
	// a batch is ready and the send waits on the client's flow-control
	// window all that time. The stream's slot and memory reservation are
	// freed and the client gets Unavailable ("no progress for …"), which
	// segpipe clients answer by resuming from the last batch they
	// delivered. Default DefaultStallTimeout; negative: never.
	StallTimeout time.Duration
	Logger       *slog.Logger // default slog.Default()

	// newBatches replaces pipeline.New (benchmarks serve prepared batches).
	newBatches func(ctx context.Context, src pipeline.Source, cfg pipeline.Config) (pipeline.Batches, error)
}

// Server serves loader streams over Arrow Flight: DoGet takes a ticket
// holding a Request and streams that request's batches in order, each
// with its resume state as app metadata; GetFlightInfo takes a descriptor
// whose command is a Request and returns its schema and endpoint.
type Server struct {
	flight.BaseFlightServer
	cfg     ServerConfig
	m       *metrics
	adm     *admission
	grpc    *grpc.Server
	mem     memory.Allocator
	active  atomic.Int64
	held    atomic.Int64
	streams atomic.Int64 // streams ever started
	// Nanoseconds all streams spent waiting for their loader and in
	// handing batches to gRPC (benchmarks split the time with them).
	loaderNanos, sendNanos atomic.Int64

	skipMu  sync.Mutex
	skipped map[string]int64 // samples the ended streams' loaders skipped
	images  int64

	peersMu sync.Mutex
	peers   map[string]int // running streams by client address
}

// peerStall returns the stall counter of a stream from the client address
// peer and the function that ends the stream's hold on it: the series is
// removed when the address's last stream ends, so series never outnumber
// running streams.
func (s *Server) peerStall(peer string) (prometheus.Counter, func()) {
	s.peersMu.Lock()
	defer s.peersMu.Unlock()
	if s.peers == nil {
		s.peers = map[string]int{}
	}
	s.peers[peer]++
	c := s.m.peerStall.WithLabelValues(peer)
	return c, func() {
		s.peersMu.Lock()
		defer s.peersMu.Unlock()
		if s.peers[peer]--; s.peers[peer] == 0 {
			delete(s.peers, peer)
			s.m.peerStall.DeleteLabelValues(peer)
		}
	}
}

// NewServer returns a server; call Serve to accept connections.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Root == "" && cfg.Open == nil {
		return nil, errors.New("remote: server needs a shard root or an Open function")
	}
	if cfg.WindowBytes == 0 {
		cfg.WindowBytes = DefaultWindowBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Loader.Logger == nil {
		cfg.Loader.Logger = cfg.Logger
	}
	if cfg.MaxMemory == 0 {
		cfg.MaxMemory = pipeline.DefaultMaxMemory()
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxStreams < 0 {
		return nil, fmt.Errorf("remote: max streams %d", cfg.MaxStreams)
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	// The budget is admission's to hold (a stream's estimate is judged
	// with its shard set's own row sizes, which the request alone does
	// not tell), so the loaders themselves run without a limit.
	cfg.Loader.MaxMemory = -1
	if cfg.Loader.CacheBytes == 0 {
		cfg.Loader.CacheBytes = pipeline.DefaultCacheBytes
	}
	s := &Server{cfg: cfg, m: newMetrics(), mem: memory.NewGoAllocator(),
		adm: newAdmission(cfg.MaxMemory, cfg.MaxStreams, cfg.Loader.CacheBytes)}
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec(nil)),
		grpc.InitialWindowSize(cfg.WindowBytes),
		grpc.InitialConnWindowSize(cfg.WindowBytes),
		grpc.WriteBufferSize(1 << 20),
		grpc.ReadBufferSize(64 << 10),
		experimental.BufferPool(wirePool),
		grpc.MaxRecvMsgSize(16 << 20),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	if cfg.Token != "" {
		opts = append(opts, authInterceptors(cfg.Token, func(r string) { s.m.refused.WithLabelValues(r).Inc() })...)
	}
	s.grpc = grpc.NewServer(opts...)
	flight.RegisterFlightServiceServer(s.grpc, s)
	return s, nil
}

// Serve accepts connections on lis until Stop; it returns nil after Stop.
func (s *Server) Serve(lis net.Listener) error {
	err := s.grpc.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop closes every connection and stream at once; each stream's loader is
// stopped and freed.
func (s *Server) Stop() { s.grpc.Stop() }

// GracefulStop stops accepting connections and waits for the streams in
// progress to finish.
func (s *Server) GracefulStop() { s.grpc.GracefulStop() }

// MetricsHandler serves the Prometheus metrics of this server.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{})
}

// HealthHandler serves /healthz (liveness: 200 while the process serves
// HTTP) and /readyz (200 when a default stream would be admitted now, 503
// with the reason when the stream limit or the memory budget is reached),
// for load balancers and Kubernetes probes.
func (s *Server) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := s.adm.ready(s.cfg.Loader)
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", why)
			return
		}
		fmt.Fprintln(w, "ready:", why)
	})
	return mux
}

// countSkips adds a finished stream's skip counts to the server's.
func (s *Server) countSkips(l pipeline.Batches, log *slog.Logger) {
	sum, ok := pipeline.SkipsOf(l)
	if !ok {
		return
	}
	s.skipMu.Lock()
	if s.skipped == nil {
		s.skipped = map[string]int64{}
	}
	for k, n := range sum.Skipped {
		s.skipped[k] += n
		s.m.skipped.WithLabelValues(k).Add(float64(n))
	}
	s.images += sum.Images
	s.skipMu.Unlock()
	if sum.Total() > 0 {
		log.Warn("stream skipped samples", "summary", sum.String())
	}
}

// Skipped is the skip summary of every stream that has ended: the samples
// their loaders skipped (damaged shard data, undecodable images) by reason.
func (s *Server) Skipped() pipeline.SkipSummary {
	s.skipMu.Lock()
	defer s.skipMu.Unlock()
	return pipeline.SkipSummary{Images: s.images, Skipped: maps.Clone(s.skipped)}
}

// ActiveStreams is the number of DoGet streams running (each owns a
// loader and its goroutines).
func (s *Server) ActiveStreams() int64 { return s.active.Load() }

// TransportBatches is the number of batches taken from loaders whose bytes
// the transport has not yet finished with: with the loaders' prefetch it
// bounds the batch memory of the server.
func (s *Server) TransportBatches() int64 { return s.held.Load() }

// open returns the source of a shard set. A set without rows is refused
// (pipeline.ErrEmptySet, answered FailedPrecondition, naming the set as the
// client did rather than by its place on the server): its stream would end
// at once with nothing, which a trainer takes for a finished epoch rather
// than a mistake. Sources of an Open function that do not refuse it
// themselves are counted here.
func (s *Server) open(ctx context.Context, name string) (pipeline.Source, error) {
	src, err := s.openSet(ctx, name)
	if err == nil && datasetInfo(src).Images == 0 {
		if c, ok := src.(io.Closer); ok {
			c.Close()
		}
		err = pipeline.ErrEmptySet
	}
	if errors.Is(err, pipeline.ErrEmptySet) {
		return nil, fmt.Errorf("shard set %s: nothing to stream (convert data into it, or name another set): %w", quote(name), pipeline.ErrEmptySet)
	}
	return src, err
}

// openSet returns the source of a shard set, as it is.
func (s *Server) openSet(ctx context.Context, name string) (pipeline.Source, error) {
	clean, err := cleanSet(name)
	if err != nil {
		return nil, err
	}
	if s.cfg.Open != nil {
		return s.cfg.Open(ctx, clean)
	}
	dir := filepath.Join(s.cfg.Root, filepath.FromSlash(clean))
	if _, err := os.Stat(filepath.Join(dir, shard.ManifestName)); err != nil {
		return nil, fmt.Errorf("shard set %s: %w", quote(name), os.ErrNotExist)
	}
	return pipeline.OpenShardsContext(ctx, dir)
}

// schemaOf returns the stream schema of a request (what the loader's
// records carry, windowed when asked).
func schemaOf(cfg pipeline.Config, transport string) (*arrow.Schema, error) {
	// The loader's own builder: its canvas (rect, multi_scale) and columns.
	b, err := cfg.NewBatchBuilder()
	if err != nil {
		return nil, err
	}
	if transport == MasksWindowed {
		return b.WindowedSchema(), nil
	}
	return b.Schema(), nil
}

// grpcError maps err to its gRPC status; the message is clipped, so that
// an error that carries client input (an Open function's) never echoes it
// at its own size.
func grpcError(err error) error {
	msg := clip(err.Error(), maxErrorMessage)
	switch {
	case errors.Is(err, ErrOverBudget), errors.Is(err, pipeline.ErrEmptySet):
		return status.Error(codes.FailedPrecondition, msg)
	case errors.Is(err, pipeline.ErrMemoryLimit):
		return status.Error(codes.ResourceExhausted, msg)
	case errors.Is(err, ErrBadRequest):
		return status.Error(codes.InvalidArgument, msg)
	case errors.Is(err, os.ErrNotExist):
		return status.Error(codes.NotFound, msg)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, msg)
	}
	return status.Error(codes.FailedPrecondition, msg)
}

// streamState is the app metadata of every batch: the resume state after
// it and its index in this stream.
type streamState struct {
	Seed     uint64 `json:"seed"`
	Epoch    int    `json:"epoch"`
	Consumed int64  `json:"consumed"`
	Batch    int64  `json:"batch"`
}

// DoGet implements flight.FlightServer.
//
// The stream runs in its own goroutine so that DoGet can end it when its
// client stalls (ServerConfig.StallTimeout): a send blocked on the
// client's flow-control window returns only once gRPC cancels the stream,
// which it does when the handler returns. The stream's goroutine then sees
// its send fail and frees the loader and the reservation.
func (s *Server) DoGet(t *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	g := newStallGuard(stream, s.cfg.StallTimeout)
	defer g.cancel(nil)
	ended := make(chan error, 1)
	go func() {
		held := &streamHeld{s: s}
		err := s.doGet(t, g, held)
		// A stream that did not finish may leave batches queued in a
		// transport that will never write or free them: when the
		// connection dies, gRPC fails the send (its done channel closes)
		// before it cancels the stream's context, so an error return is
		// enough to settle the count, whichever of the two DoGet saw
		// first.
		if err != nil || g.ctx.Err() != nil {
			held.abandon()
		}
		ended <- err
	}()
	select {
	case err := <-ended:
		return err
	case <-g.stalled:
		// The stream's goroutine logs it, with the client's details.
		s.m.stalled.Inc()
		return status.Error(codes.Unavailable, context.Cause(g.ctx).Error())
	}
}

// errStalled is the cause of a stream context that the stall guard ended.
var errStalled = errors.New("segpipe serve: no progress")

// stallGuard is a DoGet stream whose sends are timed: one that waits on the
// client longer than timeout cancels the stream's own context (stopping
// its loader) and closes stalled, and no later send is attempted.
type stallGuard struct {
	flight.FlightService_DoGetServer
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timeout time.Duration // ≤ 0: never
	stalled chan struct{}
	once    sync.Once
}

func newStallGuard(stream flight.FlightService_DoGetServer, timeout time.Duration) *stallGuard {
	ctx, cancel := context.WithCancelCause(stream.Context())
	return &stallGuard{FlightService_DoGetServer: stream, ctx: ctx, cancel: cancel, timeout: timeout, stalled: make(chan struct{})}
}

// Context is the stream's context, cancelled also by a stall.
func (g *stallGuard) Context() context.Context { return g.ctx }

func (g *stallGuard) SendMsg(m any) error {
	if err := g.ctx.Err(); err != nil {
		return context.Cause(g.ctx)
	}
	if g.timeout <= 0 {
		return g.FlightService_DoGetServer.SendMsg(m)
	}
	t := time.AfterFunc(g.timeout, g.stall)
	defer t.Stop()
	return g.FlightService_DoGetServer.SendMsg(m)
}

// stall ends the stream; the context is cancelled before stalled closes,
// so that no send starts once DoGet may have returned.
func (g *stallGuard) stall() {
	g.once.Do(func() {
		g.cancel(fmt.Errorf("%w for %s: the client took no data (--stall-timeout), so the stream was ended and its slot freed; resume from the last batch delivered", errStalled, g.timeout))
		close(g.stalled)
	})
}

func (s *Server) doGet(t *flight.Ticket, stream flight.FlightService_DoGetServer, held *streamHeld) error {
	req, err := ParseRequest(t.GetTicket())
	if err != nil {
		s.m.refused.WithLabelValues("bad_request").Inc()
		return grpcError(err)
	}
	ctx := stream.Context()
	addr := "unknown"
	if p, ok := peer.FromContext(ctx); ok {
		if h, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			addr = h
		}
	}
	client := fmt.Sprintf("%s rank %d/%d", addr, req.Rank, max(req.WorldSize, 1))
	log := s.cfg.Logger.With("client", client, "shards", clip(req.Shards, maxQuote), "start", req.Start)
	plan, err := NewPlan(req, s.cfg.Loader)
	if err != nil {
		if errors.Is(err, ErrOverBudget) {
			s.m.refused.WithLabelValues("memory").Inc()
		}
		return grpcError(err)
	}
	set, _ := cleanSet(req.Shards) // Validate checked it
	// Opened before admission, which sizes the stream's window of encoded
	// rows by the set's own rows (manifest and footers only).
	src, err := s.open(ctx, req.Shards)
	if err != nil {
		s.m.refused.WithLabelValues("shards").Inc()
		return grpcError(err)
	}
	if c, ok := src.(io.Closer); ok {
		defer c.Close()
	}
	cfg, done, ref := s.adm.admit(set, plan.Config, src)
	plan.Config = cfg
	if ref != nil {
		s.m.refused.WithLabelValues(ref.reason).Inc()
		log.Info("stream refused", "reason", ref.reason, "err", ref.err)
		return ref.err
	}
	defer done()
	// The loader lives exactly as long as the stream: when the client goes
	// away gRPC cancels ctx, the loader's goroutines stop and Close waits
	// for them.
	l, err := plan.open(ctx, src, s.cfg.newBatches)
	if err != nil {
		return grpcError(err)
	}
	defer l.Close()
	defer s.countSkips(l, log)
	s.active.Add(1)
	s.streams.Add(1)
	s.m.active.Inc()
	defer func() { s.active.Add(-1); s.m.active.Dec() }()
	log.Info("stream started", "masks", req.transport(), "compression", req.compression(), "batch_size", cfg.BatchSize, "imgsz", cfg.Augment.ImgSz,
		"estimate_bytes", s.adm.estimate())

	ps := &payloadSender{send: func(m *outMsg) error { return stream.SendMsg(m) }}
	if err := ps.sendSchema(plan.Schema, s.mem); err != nil {
		if ctx.Err() != nil {
			return ended(log, ctx, 0)
		}
		return status.Error(codes.Unavailable, fmt.Sprintf("send schema: %v", err))
	}
	// With compression the writer replaces each body buffer by a
	// compressed copy from s.mem and releases that copy once WritePayload
	// returns, while gRPC may still be writing it: s.mem is the Go
	// allocator, whose Free leaves the bytes to the garbage collector, so
	// the message's reference keeps them alive.
	opts := append([]ipc.Option{ipc.WithSchema(plan.Schema), ipc.WithAllocator(s.mem)}, req.writerOptions()...)
	w := ipc.NewWriterWithPayloadWriter(ps, opts...)
	sent := s.m.sent(req.transport(), req.compression())
	peerStall, endPeer := s.peerStall(addr)
	defer endPeer()
	var n int64
	var stalled time.Duration
	for req.Limit == 0 || n < req.Limit {
		t0 := time.Now()
		rec, err := l.Next(ctx)
		s.m.loaderWait.Add(time.Since(t0).Seconds())
		s.loaderNanos.Add(int64(time.Since(t0)))
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return ended(log, ctx, n, sent.attrs()...)
			}
			log.Error("loader failed", "batches", n, "err", err)
			return grpcError(err)
		}
		st := l.State()
		rows := rec.NumRows()
		out, err := plan.Encode(rec, s.mem)
		if err != nil {
			return grpcError(err)
		}
		app, _ := json.Marshal(streamState{Seed: st.Seed, Epoch: st.Epoch, Consumed: st.Consumed, Batch: n})
		ps.app = app
		ps.release = held.add(out)
		t1 := time.Now()
		err = w.Write(out)
		d := time.Since(t1)
		stalled += d
		s.m.stall.Add(d.Seconds())
		peerStall.Add(d.Seconds())
		s.sendNanos.Add(int64(d))
		if ps.release != nil { // never reached the transport
			ps.release()
			ps.release = nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ended(log, ctx, n, sent.attrs()...)
			}
			return status.Error(codes.Unavailable, fmt.Sprintf("send batch %d: %v", n, err))
		}
		n++
		s.m.batches.Inc()
		s.m.images.Add(float64(rows))
		s.m.bytes.Add(float64(ps.sent))
		sent.add(ps.sent, rows)
	}
	if err := w.Close(); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	log.Info("stream finished", append([]any{"batches", n}, append(sent.attrs(), "stall_s", stalled.Seconds())...)...)
	return nil
}

// ended logs a stream whose context ended after n batches, with attrs
// (what it sent), and returns its status: the client went away, or stalled
// (DoGet answers that one).
func ended(log *slog.Logger, ctx context.Context, n int64, attrs ...any) error {
	cause := context.Cause(ctx)
	attrs = append([]any{"batches", n}, append(attrs, "reason", cause)...)
	if errors.Is(cause, errStalled) {
		log.Warn("stream ended: the client stalled", attrs...)
		return status.Error(codes.Unavailable, cause.Error())
	}
	log.Info("stream ended by the client", attrs...)
	return status.FromContextError(ctx.Err()).Err()
}

// GetFlightInfo implements flight.FlightServer: the descriptor's command is
// a Request; the answer holds its schema, one endpoint whose ticket is the
// normalised request, located at every peer (the one that serves its rank
// first, then the failover order), and the shard set's DatasetInfo as JSON
// app metadata. Its descriptor is the normalised request too.
func (s *Server) GetFlightInfo(ctx context.Context, d *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	if d.GetType() != flight.DescriptorCMD {
		return nil, status.Error(codes.InvalidArgument, "segpipe serve: the descriptor must be a command holding a loader request")
	}
	req, err := ParseRequest(d.GetCmd())
	if err != nil {
		s.m.refused.WithLabelValues("bad_request").Inc()
		return nil, grpcError(err)
	}
	plan, err := NewPlan(req, s.cfg.Loader)
	if err != nil {
		return nil, grpcError(err)
	}
	src, err := s.open(ctx, req.Shards)
	if err != nil {
		s.m.refused.WithLabelValues("shards").Inc()
		return nil, grpcError(err)
	}
	// The images the request reads: a fraction reads a prefix of the set.
	app, err := json.Marshal(datasetInfo(plan.Config.Subset(src)))
	if c, ok := src.(io.Closer); ok {
		c.Close()
	}
	if err != nil {
		return nil, grpcError(err)
	}
	req.Version = RequestVersion
	req.Shards, _ = cleanSet(req.Shards) // checked by ParseRequest
	ticket := req.Marshal()
	ep := &flight.FlightEndpoint{Ticket: &flight.Ticket{Ticket: ticket}}
	if ep.Location, err = s.locations(ctx, req.Rank); err != nil {
		return nil, err
	}
	// The descriptor echoed is the normalised request, not the client's
	// bytes: every field of it is bounded (Shards by MaxShardsLen), so the
	// answer is never the size of what a client chose to send.
	return &flight.FlightInfo{
		Schema:           flight.SerializeSchema(plan.Schema, s.mem),
		FlightDescriptor: &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: ticket},
		Endpoint:         []*flight.FlightEndpoint{ep},
		TotalRecords:     -1,
		TotalBytes:       -1,
		Ordered:          true,
		AppMetadata:      app,
	}, nil
}

// streamHeld tracks the batches of one stream that the transport holds.
// gRPC frees a message's buffers once written, but when a connection dies
// with messages still queued it drops them without freeing: abandon then
// settles the count (the record is left to the garbage collector rather
// than released, because nothing guarantees gRPC is done reading it).
type streamHeld struct {
	s    *Server
	mu   sync.Mutex
	live []*heldBatch
}

type heldBatch struct {
	done atomic.Bool
	rec  arrow.RecordBatch
}

// add counts rec as held and returns the function that releases it.
func (h *streamHeld) add(rec arrow.RecordBatch) func() {
	b := &heldBatch{rec: rec}
	h.s.held.Add(1)
	h.s.m.held.Inc()
	h.mu.Lock()
	h.live = slices.DeleteFunc(h.live, func(x *heldBatch) bool { return x.done.Load() })
	h.live = append(h.live, b)
	h.mu.Unlock()
	return func() {
		if b.done.CompareAndSwap(false, true) {
			b.rec.Release()
			h.s.held.Add(-1)
			h.s.m.held.Dec()
		}
	}
}

// abandon stops counting every batch still held; call it only once the
// stream has ended, so that no batch is added after it. gRPC may still be
// writing one: that is why the records are not released here.
func (h *streamHeld) abandon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.live {
		if b.done.CompareAndSwap(false, true) {
			h.s.held.Add(-1)
			h.s.m.held.Dec()
		}
	}
	h.live = nil
}
