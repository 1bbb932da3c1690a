// Command streamclient reads one stream from a segpipe server and throws
// the batches away: the consumer scripts/measure-serve-memory.sh runs
// against `segpipe serve` to measure the memory of one stream.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/segpipe/segpipe/pipeline/remote"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8815", "server HOST:PORT (or a fleet: a comma-separated list)")
	shards := flag.String("shards", "", "shard set below the server's root")
	batch := flag.Int("batch", 32, "images per batch")
	imgsz := flag.Int("imgsz", 640, "image side")
	epochs := flag.Int("epochs", 1, "epochs to stream")
	token := flag.String("token", os.Getenv("SEGPIPE_TOKEN"), "bearer token")
	flag.Parse()
	if err := run(*addr, *token, remote.Request{Shards: *shards, BatchSize: *batch, ImgSz: *imgsz, Epochs: *epochs,
		Masks: remote.MasksWindowed}); err != nil {
		fmt.Fprintln(os.Stderr, "streamclient:", err)
		os.Exit(1)
	}
}

func run(addr, token string, req remote.Request) error {
	c, err := remote.NewClient(remote.ClientConfig{Addr: addr, Token: token})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	t0 := time.Now()
	s, err := c.Stream(ctx, req)
	if err != nil {
		return err
	}
	defer s.Close()
	n, images := 0, int64(0)
	for {
		rec, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n++
		images += rec.NumRows()
		rec.Release()
	}
	fmt.Printf("%d batches, %d images in %.1fs\n", n, images, time.Since(t0).Seconds())
	return nil
}
