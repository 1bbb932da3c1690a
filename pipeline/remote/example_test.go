package remote_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"

	"github.com/segpipe/segpipe/internal/testenv/exampledata"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/remote"
)

// Consuming a remote stream: a trainer calls Client.Open where it would
// call pipeline.New, and reads the same batches; the loader runs in the
// server (`segpipe serve`, started here in the process for the example).
// The stream reconnects by itself and resumes from Stream.State.
func Example() {
	root, err := os.MkdirTemp("", "segpipe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	shards, err := exampledata.Shards(root, 8, 160)
	if err != nil {
		log.Fatal(err)
	}
	srv, err := remote.NewServer(remote.ServerConfig{Root: root, Loader: pipeline.Config{Workers: 1}})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	c, err := remote.NewClient(remote.ClientConfig{Addr: lis.Addr().String()})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	aug := augment.DefaultConfig()
	aug.ImgSz = 128
	ctx := context.Background()
	// The set is named relative to the server's root.
	s, err := c.Open(ctx, filepath.Base(shards), pipeline.Config{BatchSize: 4, Start: order.State{Seed: 1}, Augment: aug})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	images := 0
	for {
		rec, err := s.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		images += int(rec.NumRows())
		rec.Release()
	}
	fmt.Println("images:", images, "state:", s.State())
	// Output:
	// images: 8 state: {1 1 0}
}
