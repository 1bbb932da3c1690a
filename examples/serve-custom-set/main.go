// Command serve-custom-set serves shard sets over Arrow Flight, as
// `segpipe serve` does, with a rule of its own for what a requested name
// means: "NAME@K" is the set NAME under the root, each image K times per
// epoch (oversampling a small set beside a large one), through a
// pipeline.Source the server's loaders read like any other. A trainer
// streams it with the Python package or remote.Client, naming "NAME@K".
//
//	go run ./examples/serve-custom-set -root /data/shards -addr 127.0.0.1:8815
//
// With -check NAME@K it instead serves on a free loopback port, streams
// one epoch of that set through remote.Client, prints what came, and
// exits: how CI runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/remote"
)

func main() {
	root := flag.String("root", "", "directory whose subdirectories are shard sets")
	addr := flag.String("addr", "127.0.0.1:8815", "address to serve on")
	check := flag.String("check", "", "stream one epoch of this NAME@K from an in-process server, print it, and exit")
	flag.Parse()
	if *root == "" {
		fmt.Fprintln(os.Stderr, "serve-custom-set: -root is required")
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *root, *addr, *check); err != nil {
		slog.Error("serve-custom-set", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, root, addr, check string) error {
	srv, err := remote.NewServer(remote.ServerConfig{
		// Open replaces the server's own lookup of a name under Root.
		Open: func(ctx context.Context, name string) (pipeline.Source, error) { return open(root, name) },
	})
	if err != nil {
		return err
	}
	if check != "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	if check == "" {
		slog.Info("serving", "addr", lis.Addr().String(), "root", root)
		select {
		case <-ctx.Done():
			srv.GracefulStop()
			return nil
		case err := <-served:
			return err
		}
	}
	defer srv.Stop()
	return stream(ctx, lis.Addr().String(), check)
}

// open resolves NAME@K: the shard set NAME under root, repeated K times.
// Names are checked as the server checks its own: no path may leave root.
func open(root, name string) (pipeline.Source, error) {
	set, k := name, 1
	if i := strings.LastIndexByte(name, '@'); i >= 0 {
		n, err := strconv.Atoi(name[i+1:])
		if err != nil || n < 1 || n > 100 {
			return nil, fmt.Errorf("%q: want NAME@K with K from 1 to 100", name)
		}
		set, k = name[:i], n
	}
	if set == "" || !filepath.IsLocal(set) {
		return nil, fmt.Errorf("%q: not a shard set under the root", name)
	}
	src, err := pipeline.OpenShards(filepath.Join(root, set))
	if err != nil {
		return nil, err
	}
	return pipeline.Repeat(src, k), nil
}

// stream reads one epoch of name as a trainer would.
func stream(ctx context.Context, addr, name string) error {
	c, err := remote.NewClient(remote.ClientConfig{Addr: addr})
	if err != nil {
		return err
	}
	defer c.Close()
	aug := augment.DefaultConfig()
	aug.ImgSz = 320
	s, err := c.Open(ctx, name, pipeline.Config{BatchSize: 8, Start: order.State{Seed: 1}, Augment: aug})
	if err != nil {
		return err
	}
	defer s.Close()
	batches, images := 0, 0
	for {
		rec, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		batches++
		images += int(rec.NumRows())
		rec.Release()
	}
	fmt.Printf("%s: %d batches, %d images in one epoch\n", name, batches, images)
	return nil
}
