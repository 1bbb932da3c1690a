package remote

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/internal/backoff"
	"github.com/segpipe/segpipe/internal/bufpool"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
)

// ClientConfig configures a Client. Zero values take the documented
// defaults.
type ClientConfig struct {
	// Addr is host:port of a segpipe server, or a fleet of them: a
	// comma-separated list, or one host name that resolves to several
	// addresses (see fleet.go).
	Addr  string
	Token string      // bearer token, if the server wants one
	TLS   *tls.Config // nil: plaintext
	// Retries is how many times in a row a dropped stream is reopened
	// (from the state last delivered) before Next fails; default 5,
	// negative for none.
	Retries int
	// Backoff is the wait before the first retry, doubled each time up to
	// MaxBackoff; defaults 100 ms and 5 s.
	Backoff, MaxBackoff time.Duration
	// AdmissionWait is how long a stream waits in all, retrying with the
	// same backoff, for a server that refuses it for now
	// (ResourceExhausted: its stream limit or memory budget reached)
	// before Next fails; default 10 minutes, negative for no wait. A
	// refusal is a queue, not a failure: trainers that start together
	// take turns, and refusals do not count against Retries.
	AdmissionWait time.Duration
	// Memory is where every buffer a delivered record may alias comes
	// from: the chunks HTTP/2 frames are read into, the bodies copied out
	// of them, and (unless Allocator says otherwise) the expanded mask
	// stacks; nil: the Go heap. A consumer that hands records to C code
	// which keeps them after the call returns (the Arrow C data interface)
	// gives a C allocator, as cgo's pointer rules require. Memory from it
	// goes back to its Free as records are released, after Close too.
	Memory memory.Allocator
	// Allocator serves the dense mask stacks of windowed batches and the
	// buffers of decompressed bodies; default the client's own pool, which
	// recycles a released batch's buffers for the next batches instead of
	// the garbage collector clearing fresh ones (a fresh stack is faulted
	// in and zeroed twice, by the runtime and by the expansion).
	Allocator memory.Allocator
	// Compression is the body compression Open and OpenWindowed ask for
	// (Request.Compression: CompressionNone, the default, CompressionLZ4
	// or CompressionZstd). The records delivered are the same either way:
	// the stream's reader decompresses them. Stream takes it from its
	// Request instead.
	Compression string
	WindowBytes int32        // HTTP/2 window, default DefaultWindowBytes
	Logger      *slog.Logger // default slog.Default()

	lookupHost func(ctx context.Context, host string) ([]string, error) // default net.DefaultResolver.LookupHost
}

// Client is a connection to a segpipe server. It is safe for concurrent
// use; each Stream is not.
type Client struct {
	cfg   ClientConfig
	recv  *bufpool.Pool
	arena *arenaPool
	conn  *grpc.ClientConn
	fc    flight.FlightServiceClient
	fleet *fleet // set when Addr names several servers
}

// maxMessage bounds one batch message: the protocol's own limit, not a
// memory policy (a batch of 32 images at 1024² is ~100 MB).
const maxMessage = 1<<31 - 1

// NewClient prepares a connection to cfg.Addr (made on first use), or one
// to each server of a fleet.
func NewClient(cfg ClientConfig) (*Client, error) {
	addrs, err := fleetAddrs(cfg)
	if err != nil || len(addrs) > 1 {
		return newFleetClient(cfg, addrs, err)
	}
	return newClient(cfg)
}

func newClient(cfg ClientConfig) (*Client, error) {
	cfg = cfg.withDefaults()
	// Retain enough freed buffers for the batches a trainer typically
	// holds while the next arrive.
	recv := bufpool.NewOn(cfg.Memory, 1<<30)
	if cfg.Allocator == nil {
		cfg.Allocator = recv
	}
	arena := newArenaPool(cfg.Memory)
	opts := []grpc.DialOption{
		grpc.WithInitialWindowSize(cfg.WindowBytes),
		grpc.WithInitialConnWindowSize(cfg.WindowBytes),
		grpc.WithReadBufferSize(1 << 20),
		experimental.WithBufferPool(arena),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.ForceCodecV2(newCodec(arena))),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: cfg.Token, secure: cfg.TLS != nil}))
	}
	conn, err := grpc.NewClient(cfg.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("remote: client for %s: %w", cfg.Addr, err)
	}
	return &Client{cfg: cfg, recv: recv, arena: arena, conn: conn, fc: flight.NewFlightServiceClient(conn)}, nil
}

// withDefaults fills in the documented defaults.
func (cfg ClientConfig) withDefaults() ClientConfig {
	if cfg.Retries == 0 {
		cfg.Retries = 5
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	if cfg.AdmissionWait == 0 {
		cfg.AdmissionWait = 10 * time.Minute
	}
	if cfg.WindowBytes == 0 {
		cfg.WindowBytes = DefaultWindowBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Close closes the connection; open streams fail.
func (c *Client) Close() error {
	if c.fleet != nil {
		return c.fleet.close()
	}
	err := c.conn.Close()
	c.arena.close()
	c.recv.Close()
	return err
}

// Info asks the server for a request's schema and endpoint.
func (c *Client) Info(ctx context.Context, req Request) (*flight.FlightInfo, error) {
	if req.Version == 0 {
		req.Version = RequestVersion
	}
	if c.fleet != nil {
		return c.fleet.info(ctx, req)
	}
	info, err := c.fc.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: req.Marshal()})
	if err != nil {
		return nil, fmt.Errorf("remote: flight info from %s: %w", c.cfg.Addr, err)
	}
	return info, nil
}

// Dataset asks the server what the shard set shards holds.
func (c *Client) Dataset(ctx context.Context, shards string) (DatasetInfo, error) {
	info, err := c.Info(ctx, Request{Shards: shards})
	if err != nil {
		return DatasetInfo{}, err
	}
	var d DatasetInfo
	if len(info.AppMetadata) == 0 {
		return d, fmt.Errorf("remote: %s does not describe shard set %q (a server older than this client)", c.cfg.Addr, shards)
	}
	if err := json.Unmarshal(info.AppMetadata, &d); err != nil {
		return d, fmt.Errorf("remote: %s: shard set %q description: %w", c.cfg.Addr, shards, err)
	}
	return d, nil
}

// Open streams the shard set shards through a server loader configured as
// cfg (see NewRequest), with windowed masks on the wire, delivered as
// dense batch records. It is what a trainer calls where it would call
// pipeline.New.
func (c *Client) Open(ctx context.Context, shards string, cfg pipeline.Config) (*Stream, error) {
	return c.open(ctx, shards, cfg, false)
}

// OpenWindowed is Open for a consumer that expands the masks itself, on a
// device: the stream's batches keep the windowed form they travel in
// (batch.WindowedSchema's columns, read with batch.MaskWindowsOf), each
// checked as the host expansion checks it — the batch contract, the
// windows against the grid and the data — and refused with the same
// errors.
func (c *Client) OpenWindowed(ctx context.Context, shards string, cfg pipeline.Config) (*Stream, error) {
	return c.open(ctx, shards, cfg, true)
}

func (c *Client) open(ctx context.Context, shards string, cfg pipeline.Config, keepWindowed bool) (*Stream, error) {
	req, err := NewRequest(shards, cfg)
	if err != nil {
		return nil, err
	}
	req.Masks = MasksWindowed
	req.Compression = c.cfg.Compression
	return c.stream(ctx, req, keepWindowed)
}

// Stream is one rank's batches from a server. It implements
// pipeline.Batches: a trainer takes batches from it exactly as from a local
// loader. Next must be called from one goroutine at a time.
type Stream struct {
	c         *Client
	req       Request
	ctx       context.Context
	cancel    context.CancelFunc
	rdr       *ipc.Reader
	msgs      *msgReader
	mu        sync.Mutex // guards scancel, which a cancelled Next calls from another goroutine
	scancel   context.CancelFunc
	exp       *expander
	keepWin   bool     // deliver windowed batches windowed (OpenWindowed)
	fl        fleetPos // which server of a fleet serves the stream
	state     order.State
	delivered int64
	retries   int
	queued    time.Duration // waited for admission since the last batch
	closed    bool
	done      bool
}

var _ pipeline.Batches = (*Stream)(nil)

// Stream opens the stream of req and waits for its schema. It fails at
// once on what the server refuses (bad request, unknown shard set,
// authentication); dropped connections later are retried by Next. ctx
// bounds the opening only: the stream lives until Close, and each Next
// takes its own context.
func (c *Client) Stream(ctx context.Context, req Request) (*Stream, error) {
	return c.stream(ctx, req, false)
}

// StreamAsSent is Stream delivering each record in the form it travelled
// in: with req.Masks windowed the masks stay windowed, checked as
// OpenWindowed checks them, for a consumer that expands them itself.
func (c *Client) StreamAsSent(ctx context.Context, req Request) (*Stream, error) {
	return c.stream(ctx, req, true)
}

func (c *Client) stream(ctx context.Context, req Request, keepWindowed bool) (*Stream, error) {
	if req.Version == 0 {
		req.Version = RequestVersion
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s := &Stream{c: c, req: req, state: req.Start, keepWin: keepWindowed}
	c.fleet.place(s)
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, s.cancel)
	err := s.open()
	for err != nil && s.failover(err) {
		err = s.open()
	}
	if err != nil && status.Code(err) == codes.ResourceExhausted && ctx.Err() == nil {
		// A server that refuses for now (its stream limit or memory
		// budget reached) is waited for as a dropped stream is: the first
		// Next reopens with backoff. Ranks that start together then take
		// turns instead of failing at once. A server that cannot be
		// reached, or refuses for good, fails Open.
		s.c.cfg.Logger.Warn("stream not opened yet, retrying on the first read", "addr", s.c.cfg.Addr, "err", err)
		err = nil
	}
	if !stop() {
		err = errors.Join(ctx.Err(), err)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// open starts DoGet from the last delivered state and reads the schema.
func (s *Stream) open() error {
	req := s.req
	req.Start = s.state
	if req.Limit > 0 {
		req.Limit -= s.delivered
	}
	sctx, cancel := context.WithCancel(s.ctx)
	st, err := s.c.fc.DoGet(sctx, &flight.Ticket{Ticket: req.Marshal()})
	if err != nil {
		cancel()
		return fmt.Errorf("remote: DoGet on %s: %w", s.c.cfg.Addr, err)
	}
	mr := &msgReader{st: st, mem: s.c.recv}
	rdr, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(s.c.cfg.Allocator))
	if err != nil {
		mr.Release()
		cancel()
		return fmt.Errorf("remote: stream from %s: %w", s.c.cfg.Addr, err)
	}
	if err := checkSchema(rdr.Schema(), req.transport(), req.Rect || req.MultiScale > 0); err != nil {
		rdr.Release()
		cancel()
		return err
	}
	if req.transport() == MasksWindowed && s.exp == nil {
		if s.exp, err = newExpander(rdr.Schema(), s.c.cfg.Allocator); err != nil {
			rdr.Release()
			cancel()
			return err
		}
	}
	s.rdr, s.msgs = rdr, mr
	s.mu.Lock()
	s.scancel = cancel
	s.mu.Unlock()
	return nil
}

func checkSchema(sc *arrow.Schema, transport string, canvas bool) error {
	names := fieldNames(sc)
	want := []string{batch.ColImage, batch.ColImageID, batch.ColOrigHeight, batch.ColOrigWidth, batch.ColTransform,
		batch.ColBoxes, batch.ColClasses, batch.ColIsCrowd, batch.ColBoxesPerImage}
	if transport == MasksWindowed {
		want = append(want, ColMaskWindows, ColMaskData)
	} else {
		want = append(want, batch.ColMasks)
	}
	if canvas {
		want = append(want, batch.ColCanvas)
	}
	if len(names) != len(want) {
		return fmt.Errorf("remote: server sent columns %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			return fmt.Errorf("remote: server sent columns %v, want %v", names, want)
		}
	}
	return nil
}

func (s *Stream) drop() {
	if s.rdr != nil {
		s.rdr.Release()
		s.msgs.Release()
		s.rdr, s.msgs = nil, nil
	}
	s.cancelCurrent()
}

func (s *Stream) cancelCurrent() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scancel != nil {
		s.scancel()
		s.scancel = nil
	}
}

// retryable tells transport failures (reconnect and resume) from answers
// (bad request, auth, data errors), which a retry would only repeat.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

// Next implements pipeline.Batches. The caller owns the record. After a
// dropped connection it reopens the stream from the last delivered state,
// waiting Backoff, 2·Backoff, … between attempts; after Retries failed
// attempts in a row it returns an error naming the last cause.
func (s *Stream) Next(ctx context.Context) (arrow.RecordBatch, error) {
	if s.closed {
		return nil, errors.New("remote: Next after Close")
	}
	if s.done || (s.req.Limit > 0 && s.delivered >= s.req.Limit) {
		// Never reopen for a limit already reached: a reopened request
		// with limit 0 would mean "no limit".
		s.done = true
		s.drop()
		return nil, io.EOF
	}
	// A cancelled call ends the gRPC stream under it; the next call
	// reopens from the state delivered so far.
	stop := context.AfterFunc(ctx, s.cancelCurrent)
	defer stop()
	wait := backoff.New(s.c.cfg.Backoff, s.c.cfg.MaxBackoff)
	for {
		var err error
		if s.rdr == nil {
			if s.scheduleDone() {
				// The connection died after the last batch, before the
				// stream's end: there is nothing left to reopen for,
				// and the server would refuse the request as empty.
				s.done = true
				return nil, io.EOF
			}
			err = s.open()
		}
		if err == nil {
			if s.rdr.Next() {
				return s.deliver()
			}
			err = s.rdr.Err()
			if err == nil || errors.Is(err, io.EOF) {
				s.done = true
				s.drop()
				return nil, io.EOF
			}
		}
		s.drop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !retryable(err) {
			return nil, fmt.Errorf("remote: stream from %s after %d batches: %w", s.c.cfg.Addr, s.delivered, err)
		}
		if s.scheduleDone() {
			continue // to the end of the stream, without waiting
		}
		if s.failover(err) {
			continue
		}
		if status.Code(err) == codes.ResourceExhausted {
			if s.queued >= s.c.cfg.AdmissionWait {
				return nil, fmt.Errorf("remote: stream from %s after %d batches: refused for %s (raise ClientConfig.AdmissionWait, or ask less of the server): %w",
					s.c.cfg.Addr, s.delivered, s.queued.Round(time.Second), err)
			}
			d := wait.Delay()
			s.c.cfg.Logger.Info("server full, waiting for a turn", "addr", s.c.cfg.Addr, "batches", s.delivered, "waited", s.queued.Round(time.Millisecond), "wait", d)
			if werr := wait.Wait(ctx); werr != nil {
				return nil, fmt.Errorf("remote: stream from %s after %d batches: refused for %s, then %w; last: %v",
					s.c.cfg.Addr, s.delivered, s.queued.Round(time.Millisecond), werr, err)
			}
			s.queued += d
			continue
		}
		if s.retries >= s.c.cfg.Retries {
			return nil, fmt.Errorf("remote: stream from %s lost after %d batches; %d reconnect attempts failed, last: %w", s.c.cfg.Addr, s.delivered, s.retries, err)
		}
		s.retries++
		s.c.cfg.Logger.Warn("stream dropped, reconnecting", "addr", s.c.cfg.Addr, "batches", s.delivered, "attempt", s.retries, "wait", wait.Delay(), "err", err)
		if werr := wait.Wait(ctx); werr != nil {
			// The caller's deadline or cancellation, with what it cut
			// short: "context deadline exceeded" alone does not say that
			// the server refused every connection.
			return nil, fmt.Errorf("remote: stream from %s lost after %d batches; %d reconnect attempts, then %w; last: %v",
				s.c.cfg.Addr, s.delivered, s.retries-1, werr, err)
		}
	}
}

// scheduleDone reports whether the batches delivered so far end the
// request's schedule: the state after the last one is past its last
// epoch.
func (s *Stream) scheduleDone() bool {
	epochs := s.req.Epochs
	if epochs == 0 {
		epochs = s.req.Start.Epoch + 1 // the request's default, from its own start
	}
	return s.delivered > 0 && s.state.Epoch >= epochs
}

func (s *Stream) deliver() (arrow.RecordBatch, error) {
	rec := s.rdr.RecordBatch()
	var st streamState
	if err := json.Unmarshal(s.msgs.app, &st); err != nil {
		s.drop()
		return nil, fmt.Errorf("remote: batch %d from %s has no resume state: %w", s.delivered, s.c.cfg.Addr, err)
	}
	var out arrow.RecordBatch
	if s.exp != nil {
		var err error
		if s.keepWin {
			out, err = s.exp.windowed(rec)
		} else {
			out, err = s.exp.expand(rec)
		}
		if err != nil {
			s.drop()
			return nil, fmt.Errorf("remote: batch %d from %s: %w", s.delivered, s.c.cfg.Addr, err)
		}
	} else {
		rec.Retain()
		out = rec
	}
	s.state = order.State{Seed: st.Seed, Epoch: st.Epoch, Consumed: st.Consumed}
	s.delivered++
	s.retries, s.queued = 0, 0
	return out, nil
}

// State implements pipeline.Batches: the state after the last batch Next
// returned.
func (s *Stream) State() order.State { return s.state }

// Delivered is the number of batches Next has returned.
func (s *Stream) Delivered() int64 { return s.delivered }

// Close implements pipeline.Batches; the server frees the stream's loader
// as soon as it sees the cancellation. Records already returned stay valid.
func (s *Stream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.drop()
	s.cancel()
	return nil
}
