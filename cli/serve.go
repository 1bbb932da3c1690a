package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/internal/bytesize"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/remote"
)

func serveCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "serve",
		Usage:     "serve training batches to remote trainers over Arrow Flight",
		UsageText: "segpipe serve --shards DIR [--addr 127.0.0.1:8815] [--token T] [--tls-cert F --tls-key F] [--metrics-addr 127.0.0.1:9815] [--max-memory SIZE] [--max-streams N] [--stall-timeout 2m]",
		Description: "Runs an Arrow Flight server whose DoGet streams training batches: the ticket is a\n" +
			"JSON loader request (shard set below --shards, seed, epoch, rank/world, resume\n" +
			"state, batch size, imgsz, augmentation, masks dense|windowed). Each stream has its\n" +
			"own loader (--workers, --prefetch); the streams of one shard set share one\n" +
			"decoded-image cache of --cache bytes.\n\n" +
			"Admission: a stream's memory is estimated from its request (batches in flight\n" +
			"of batch_size × 3 × imgsz² bytes of images plus masks, and its shard set's cache)\n" +
			"and admitted only if it fits in --max-memory beside the running streams and\n" +
			"fewer than --max-streams run; otherwise the client gets ResourceExhausted with\n" +
			"the figures, before anything is allocated (segpipe clients retry with backoff),\n" +
			"or FailedPrecondition when the stream alone is over --max-memory (not retried).\n\n" +
			"Without a token the server listens on loopback only unless --allow-remote is\n" +
			"given. --token (or the SEGPIPE_TOKEN environment variable) requires\n" +
			"\"authorization: Bearer T\" on every call. --metrics-addr serves Prometheus\n" +
			"/metrics, /healthz (liveness) and /readyz (503 when a new stream would be refused).\n" +
			"Damaged shard data is skipped and counted per stream (segpipe_serve_skipped_samples_total)\n" +
			"unless --strict; the summary is printed on shutdown and stored with --run-dir.\n" +
			"A stream whose client takes no data for --stall-timeout (a batch ready, the\n" +
			"client's window full) is ended with Unavailable and its slot freed; segpipe\n" +
			"clients resume it from their last batch when they read again.\n" +
			"Stops on SIGINT/SIGTERM, letting streams in progress finish for --grace.\n\n" +
			"Example:\n  segpipe serve --shards shards --addr 127.0.0.1:8815 --metrics-addr 127.0.0.1:9815",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "shards", Usage: "shard root `DIR` or URL (s3://, gs://, azblob://): requests name shard sets below it", Required: true},
			&ucli.StringFlag{Name: "addr", Value: "127.0.0.1:8815", Usage: "listen `HOST:PORT`"},
			&ucli.StringFlag{Name: "token", Usage: "bearer `TOKEN` clients must send", Sources: ucli.EnvVars("SEGPIPE_TOKEN")},
			&ucli.StringFlag{Name: "tls-cert", Usage: "TLS certificate `FILE` (PEM)"},
			&ucli.StringFlag{Name: "tls-key", Usage: "TLS private key `FILE` (PEM)"},
			&ucli.BoolFlag{Name: "allow-remote", Usage: "listen on non-loopback addresses without a token"},
			&ucli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus /metrics on `HOST:PORT` (off when empty)"},
			&ucli.StringSliceFlag{Name: "peer", Usage: "Flight `URI` of a server sharing the ranks (repeat, in order, this one included)"},
			peersDNSFlag(),
			&ucli.IntFlag{Name: "workers", Usage: "loader workers per stream (0: GOMAXPROCS)"},
			&ucli.IntFlag{Name: "prefetch", Usage: "batches built ahead per stream (0: loader default)"},
			&ucli.StringFlag{Name: "cache", Value: "1GiB", Usage: "decoded-image cache `SIZE` per shard set (shared by its streams; default at most a quarter of --max-memory)"},
			maxMemoryFlag(),
			&ucli.IntFlag{Name: "max-streams", Value: remote.DefaultMaxStreams, Usage: "streams served at once"},
			strictFlag(),
			runDirFlag(),
			&ucli.DurationFlag{Name: "grace", Value: 10 * time.Second, Usage: "time streams get to finish on shutdown"},
			&ucli.DurationFlag{Name: "stall-timeout", Value: remote.DefaultStallTimeout,
				Usage: "end a stream whose client takes no data for this long, freeing its slot (0: never)"},
		},
		Action: func(ctx context.Context, c *ucli.Command) error {
			cache, err := bytesize.Parse(c.String("cache"))
			if err != nil {
				return usagef("--cache: %v", err)
			}
			if c.Int("workers") < 0 || c.Int("prefetch") < 0 {
				return usagef("--workers and --prefetch must not be negative")
			}
			if c.Int("max-streams") < 1 {
				return usagef("--max-streams must be at least 1")
			}
			budget, err := memoryBudget(c)
			if err != nil {
				return err
			}
			if !c.IsSet("cache") {
				// In a small container the default cache alone would
				// exceed the budget and every stream be refused.
				cache = budgetCache(cache, budget)
			}
			if budget > 0 && cache >= budget {
				return usagef("--cache %s leaves nothing of --max-memory %s for the streams", bytesize.Format(cache), bytesize.Format(budget))
			}
			cert, key := c.String("tls-cert"), c.String("tls-key")
			if (cert == "") != (key == "") {
				return usagef("--tls-cert and --tls-key go together")
			}
			if c.Duration("stall-timeout") < 0 {
				return usagef("--stall-timeout %v is negative (0 turns it off)", c.Duration("stall-timeout"))
			}
			if err := checkShardRoot(c.String("shards")); err != nil {
				return err
			}
			cfg := remote.ServerConfig{
				Root:       c.String("shards"),
				Open:       openShardsBelow(c.String("shards")),
				Token:      c.String("token"),
				Peers:      c.StringSlice("peer"),
				Loader:     pipeline.Config{Workers: int(c.Int("workers")), Prefetch: int(c.Int("prefetch")), CacheBytes: cache, Strict: c.Bool("strict")},
				MaxMemory:  budget,
				MaxStreams: int(c.Int("max-streams")),
			}
			if cfg.StallTimeout = c.Duration("stall-timeout"); cfg.StallTimeout == 0 {
				cfg.StallTimeout = -1 // the server's "never"
			}
			if cert != "" {
				if cfg.TLS, err = loadTLS(cert, key); err != nil {
					return err
				}
			}
			if cfg.PeerSource, err = peerSource(c, cfg.TLS != nil); err != nil {
				return err
			}
			return serve(ctx, c, cfg)
		},
	}
}

// loadTLS reads the server's key pair. A file that does not exist or is
// not a file, or a pair that does not parse or match, is a usage error:
// the command line names files that cannot serve; a file that exists but
// cannot be read is a failure.
func loadTLS(cert, key string) (*tls.Config, error) {
	for _, f := range []struct{ flag, path string }{{"--tls-cert", cert}, {"--tls-key", key}} {
		st, err := os.Stat(f.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, usagef("%s %q does not exist", f.flag, f.path)
		case err != nil:
			return nil, fmt.Errorf("serve: %s: %w", f.flag, err)
		case st.IsDir():
			return nil, usagef("%s %q is a directory, not a PEM file", f.flag, f.path)
		}
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("serve: TLS key pair: %w", err)
		}
		return nil, usagef("--tls-cert %q and --tls-key %q: not a usable key pair: %v", cert, key, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

func serve(ctx context.Context, c *ucli.Command, cfg remote.ServerConfig) error {
	lis, err := remote.Listen(c.String("addr"), cfg.Token != "", c.Bool("allow-remote"))
	if err != nil {
		return usagef("%v", err)
	}
	srv, err := remote.NewServer(cfg)
	if err != nil {
		lis.Close()
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var metrics *http.Server
	if a := c.String("metrics-addr"); a != "" {
		ml, err := net.Listen("tcp", a)
		if err != nil {
			lis.Close()
			return fmt.Errorf("serve: metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", srv.MetricsHandler())
		mux.Handle("/healthz", srv.HealthHandler())
		mux.Handle("/readyz", srv.HealthHandler())
		metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go metrics.Serve(ml)
		slog.Info("metrics", "addr", ml.Addr().String(), "paths", "/metrics /healthz /readyz")
	}
	scheme := "grpc"
	if cfg.TLS != nil {
		scheme = "grpc+tls"
	}
	slog.Info("serving", "addr", lis.Addr().String(), "location", scheme+"://"+lis.Addr().String(),
		"shards", cfg.Root, "auth", cfg.Token != "", "tls", cfg.TLS != nil)
	fmt.Fprintf(c.Root().Writer, "segpipe serve: %s://%s (shards %s)\n", scheme, lis.Addr(), cfg.Root)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	slog.Info("shutting down", "active_streams", srv.ActiveStreams())
	if metrics != nil {
		metrics.Close()
	}
	grace := time.AfterFunc(c.Duration("grace"), srv.Stop)
	defer grace.Stop()
	srv.GracefulStop()
	if err := <-done; err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return reportSkips(c, c.Root().Writer, srv.Skipped())
}
