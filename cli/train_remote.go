package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/remote"
	"github.com/segpipe/segpipe/trainer/train"
)

// remoteClient connects to the server named by --remote with the token and
// TLS flags.
func remoteClient(c *ucli.Command) (*remote.Client, error) {
	cfg := remote.ClientConfig{Addr: c.String("remote"), Token: c.String("remote-token"), Logger: slog.Default()}
	if ca := c.String("remote-ca"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--remote-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--remote-ca %s holds no PEM certificate", ca)
		}
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	} else if c.Bool("remote-tls") {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return remote.NewClient(cfg)
}

// streamData is a shard set behind a segpipe server as train.Data. With
// windowed set (a device that expands windows, train.ExpandsWindows) the
// training streams deliver their batches windowed (remote's
// OpenWindowed); validation streams, whose masks the host reads, and
// every stream otherwise deliver them expanded on the host.
type streamData struct {
	c        *remote.Client
	shards   string
	images   int
	windowed bool
}

func (d streamData) Images() int { return d.images }

func (d streamData) Open(ctx context.Context, cfg pipeline.Config) (pipeline.Batches, error) {
	if d.windowed && !cfg.Val {
		return d.c.OpenWindowed(ctx, d.shards, cfg)
	}
	return d.c.Open(ctx, d.shards, cfg)
}

// remoteData asks the server about a shard set and returns it as training
// data with its category table, its training batches windowed when asked.
func remoteData(ctx context.Context, c *remote.Client, shards string, windowed bool) (train.Data, []shard.Category, error) {
	info, err := c.Dataset(ctx, shards)
	if err != nil {
		return nil, nil, err
	}
	if info.Images == 0 {
		return nil, nil, fmt.Errorf("remote shard set %q holds no images", shards)
	}
	return streamData{c: c, shards: shards, images: info.Images, windowed: windowed}, info.Categories, nil
}
