//go:build cgo

package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/segpipe/segpipe/internal/backoff"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/remote"
)

// remoteOptions is options_json's "remote" object: read the batches of a
// `segpipe serve` instead of running a loader here (segpipe.h). Times are
// seconds.
type remoteOptions struct {
	Addr       string  `json:"addr"`
	Token      string  `json:"token"`
	TLS        bool    `json:"tls"`
	TLSRoots   string  `json:"tls_roots"` // PEM; empty: the system's roots
	Retries    *int    `json:"retries"`
	Backoff    float64 `json:"backoff"`
	MaxBackoff float64 `json:"max_backoff"`
	Timeout    float64 `json:"timeout"`
}

func (o *remoteOptions) check() error {
	if o.Addr == "" {
		return errors.New("segpipe: options: remote.addr: want host:port of a segpipe server")
	}
	if o.TLSRoots != "" && !o.TLS {
		return errors.New("segpipe: options: remote.tls_roots without remote.tls")
	}
	if o.Retries != nil && *o.Retries < 0 {
		return fmt.Errorf("segpipe: options: remote.retries %d: want >= 0", *o.Retries)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"backoff", o.Backoff}, {"max_backoff", o.MaxBackoff}, {"timeout", o.Timeout}} {
		if f.v < 0 || math.IsNaN(f.v) || f.v > 365*24*3600 {
			return fmt.Errorf("segpipe: options: remote.%s %v: want seconds >= 0 (0: the default)", f.name, f.v)
		}
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// remoteSource is a session's stream from a server: the pipeline/remote
// client, its retries and admission waits, with every buffer a record
// aliases in the caller's C memory (ClientConfig.Memory), so that the
// exported records follow cgo's pointer rules.
//
// A goroutine of its own reads the stream, one batch ahead, and hands each
// record over whole. The thread that calls get_next is a C thread, whose
// goroutine is locked to it: reading there, each 16 KiB frame gRPC's
// reading goroutine hands over would move the runtime's P to that thread
// and back, two thread switches a frame, 5,000 a b32@640 batch, which
// cost more client CPU than pyarrow's whole receive.
type remoteSource struct {
	client  *remote.Client // shared with the passes before and after (clients)
	entry   *clientEntry
	stream  *remote.Stream
	timeout time.Duration
	addr    string
	out     chan remoteBatch // the reader's batches, one ahead
	done    chan struct{}    // closed when the reader has returned
	end     error            // what ended the stream, once take has seen it
}

// remoteBatch is one read: a record and the state after it, or the error
// that ended the stream (io.EOF at its end).
type remoteBatch struct {
	rec arrow.RecordBatch
	st  order.State
	err error
}

// openRemote starts a session reading request (a ticket, checked as the
// server checks it) from o.Addr.
func openRemote(request []byte, o *remoteOptions, mem memory.Allocator) (*session, error) {
	req, err := remote.ParseRequest(request)
	if err != nil {
		return nil, err
	}
	// The schema the server's plan sends, for get_schema before the first
	// batch; the client checks each stream's against the request.
	plan, err := remote.NewPlan(req, pipeline.Config{})
	if err != nil {
		return nil, err
	}
	k := clientKey{addr: o.Addr, token: o.Token, tls: o.TLS, roots: o.TLSRoots, backoff: seconds(o.Backoff),
		maxBackoff: seconds(o.MaxBackoff), mem: mem}
	if o.Retries != nil {
		k.retries = *o.Retries
		if k.retries == 0 {
			k.retries = -1 // ClientConfig's "none"
		}
	}
	cfg, err := k.config()
	if err != nil {
		return nil, err
	}
	e := clients.acquire(k)
	if e.value.err != nil {
		clients.forget(e) // the next open tries again
		return nil, e.value.err
	}
	c := e.value.client
	rs := &remoteSource{client: c, entry: e, timeout: seconds(o.Timeout), addr: o.Addr}
	ctx, cancel := context.WithCancel(context.Background())
	if err := rs.open(ctx, req, cfg); err != nil {
		cancel()
		clients.release(e)
		return nil, err
	}
	rs.out, rs.done = make(chan remoteBatch, 1), make(chan struct{})
	go rs.read(ctx)
	return &session{plan: plan, remote: rs, ctx: ctx, cancel: cancel, state: req.Start}, nil
}

// read reads the stream until it ends, fails or ctx is cancelled.
func (rs *remoteSource) read(ctx context.Context) {
	defer close(rs.done)
	for {
		rec, err := rs.next(ctx)
		b := remoteBatch{rec: rec, st: rs.stream.State(), err: err}
		select {
		case rs.out <- b:
		case <-ctx.Done():
			if rec != nil {
				rec.Release()
			}
			return
		}
		if err != nil {
			return
		}
	}
}

// take returns the next record (the caller owns it) and the state after
// it; io.EOF after the last.
func (rs *remoteSource) take(ctx context.Context) (arrow.RecordBatch, order.State, error) {
	select {
	case b, ok := <-rs.out:
		if !ok {
			return nil, order.State{}, rs.end
		}
		if b.err != nil {
			// The reader has returned: later takes get the same end.
			rs.end = b.err
			close(rs.out)
			return nil, order.State{}, b.err
		}
		return b.rec, b.st, nil
	case <-ctx.Done():
		return nil, order.State{}, ctx.Err()
	}
}

// open opens the stream. The Go client fails at once on a server it
// cannot reach; a trainer that starts before its server retries instead,
// as the stream's reads do (cfg's retries and backoff), within the
// timeout.
func (rs *remoteSource) open(ctx context.Context, req remote.Request, cfg remote.ClientConfig) error {
	octx, cancel := rs.deadline(ctx)
	defer cancel()
	retries := cfg.Retries
	if retries == 0 {
		retries = 5 // ClientConfig's default
	}
	wait := backoff.New(cmp.Or(cfg.Backoff, 100*time.Millisecond), cmp.Or(cfg.MaxBackoff, 5*time.Second))
	for attempt := 0; ; attempt++ {
		var err error
		rs.stream, err = rs.client.StreamAsSent(octx, req)
		if err == nil {
			return nil
		}
		var werr error
		if status.Code(err) == codes.Unavailable && attempt < retries {
			if werr = wait.Wait(octx); werr == nil {
				continue
			}
		}
		if attempt > 0 {
			err = fmt.Errorf("%d attempts: %w", attempt+1, err)
		}
		if werr != nil {
			err = fmt.Errorf("%w: %w", err, werr) // the timeout, named by explain
		}
		return rs.explain(err, octx, "answer")
	}
}

// deadline bounds one wait for the server by the timeout option.
func (rs *remoteSource) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if rs.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, rs.timeout)
}

// explain names a timeout as one: what was waited for (an answer, a
// batch) and how long.
func (rs *remoteSource) explain(err error, ctx context.Context, what string) error {
	// err itself says so when a retry's wait would have passed the
	// deadline (backoff.Wait) before ctx ended.
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("segpipe: no %s from %s within %v (timeout): %w", what, rs.addr, rs.timeout, err)
	}
	return err
}

// next returns the next record as it travelled (the caller owns it).
func (rs *remoteSource) next(ctx context.Context) (arrow.RecordBatch, error) {
	nctx, cancel := rs.deadline(ctx)
	defer cancel()
	rec, err := rs.stream.Next(nctx)
	if err != nil && ctx.Err() == nil {
		return nil, rs.explain(err, nctx, "batch")
	}
	return rec, err
}

// close ends the stream (the server stops its loader) and the connection;
// records handed out stay valid, their memory freed as they are released.
// The session's context is cancelled first.
func (rs *remoteSource) close() {
	<-rs.done
	select {
	case b, ok := <-rs.out:
		if ok && b.rec != nil {
			b.rec.Release()
		}
	default:
	}
	rs.stream.Close()
	clients.release(rs.entry)
}

// config is the client configuration of k. With TLS, the roots are parsed
// here, once per make, and refused when they hold no certificate.
func (k clientKey) config() (remote.ClientConfig, error) {
	cfg := remote.ClientConfig{Addr: k.addr, Token: k.token, Memory: k.mem, Logger: slog.Default(),
		Retries: k.retries, Backoff: k.backoff, MaxBackoff: k.maxBackoff}
	if k.tls {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if k.roots != "" {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM([]byte(k.roots)) {
				return cfg, errors.New("segpipe: options: remote.tls_roots holds no PEM certificate")
			}
			cfg.TLS.RootCAs = pool
		}
	}
	return cfg, nil
}
