package remote_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
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
	addr, set, stop := exampleServer()
	defer stop()

	c, err := remote.NewClient(remote.ClientConfig{Addr: addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	aug := augment.DefaultConfig()
	aug.ImgSz = 128
	ctx := context.Background()
	// The set is named relative to the server's root.
	s, err := c.Open(ctx, set, pipeline.Config{BatchSize: 4, Start: order.State{Seed: 1}, Augment: aug})
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

// Records as they travelled: windowed masks stay windowed for a consumer
// that expands them itself (on a device), and ClientConfig.Memory places
// every buffer a record aliases: the loader library gives its C allocator
// there, since the C code it hands records to keeps them.
func ExampleClient_StreamAsSent() {
	addr, set, stop := exampleServer()
	defer stop()

	c, err := remote.NewClient(remote.ClientConfig{Addr: addr, Memory: memory.NewGoAllocator()})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	aug := augment.DefaultConfig()
	aug.ImgSz = 128
	req, err := remote.NewRequest(set, pipeline.Config{BatchSize: 4, Start: order.State{Seed: 1}, Augment: aug})
	if err != nil {
		log.Fatal(err)
	}
	req.Masks = remote.MasksWindowed
	ctx := context.Background()
	s, err := c.StreamAsSent(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for {
		rec, err := s.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		mw, err := batch.MaskWindowsOf(rec)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d images, windowed %v, %d windows\n", rec.NumRows(), batch.IsWindowed(rec.Schema()), mw.Count())
		rec.Release()
	}
	// Output:
	// 4 images, windowed true, 41 windows
	// 4 images, windowed true, 69 windows
}

// exampleServer serves an 8-image shard set from a temporary root in the
// process, as `segpipe serve` would, and returns its address, the set's
// name there and a function that stops it and removes the root.
func exampleServer() (addr, set string, stop func()) {
	root, err := os.MkdirTemp("", "segpipe-example-")
	if err != nil {
		log.Fatal(err)
	}
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
	return lis.Addr().String(), filepath.Base(shards), func() {
		srv.Stop()
		os.RemoveAll(root)
	}
}
