package remote

import (
	"context"
	"os"
	"testing"

	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
)

// BenchmarkClientServed measures the receiving side alone: this process
// is only the client of a `segpipe serve` running elsewhere (another
// process, pinned to other cores), so its CPU time is the client's. It
// needs SEGPIPE_SERVE_ADDR (host:port) and SEGPIPE_SERVE_SHARDS (a shard
// set below that server's root) and is skipped without them:
//
//	taskset -c 0 segpipe serve --shards ROOT --addr 127.0.0.1:8815 --workers 0 &
//	SEGPIPE_SERVE_ADDR=127.0.0.1:8815 SEGPIPE_SERVE_SHARDS=train taskset -c 1 \
//	    go test ./pipeline/remote -run '^$' -bench ClientServed -benchtime 30x -cpuprofile client.pprof
//
// One iteration is one batch of 32 images at 640 px: dense masks on the
// wire (dense), windowed on the wire and expanded on the host (windowed, the
// path of train --remote on a CPU device), windowed kept for a device that
// expands them (windowed-kept, train --remote --device cuda).
func BenchmarkClientServed(b *testing.B) {
	addr, shards := os.Getenv("SEGPIPE_SERVE_ADDR"), os.Getenv("SEGPIPE_SERVE_SHARDS")
	if addr == "" || shards == "" {
		b.Skip("set SEGPIPE_SERVE_ADDR and SEGPIPE_SERVE_SHARDS to read from a running segpipe serve")
	}
	for _, tc := range []struct {
		name  string
		masks string
		keep  bool
	}{
		{"dense", MasksDense, false},
		{"windowed", MasksWindowed, false},
		{"windowed-kept", MasksWindowed, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := NewClient(ClientConfig{Addr: addr})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			// Epochs far past any -benchtime: the stream never ends inside
			// the loop.
			req := Request{Shards: shards, ImgSz: 640, BatchSize: 32, Masks: tc.masks, Epochs: 1 << 20, Start: order.State{Seed: 1}}
			s, err := c.stream(context.Background(), req, tc.keep)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var batches pipeline.Batches = s
			// The first batches (connection, the server's loader starting,
			// the receive arena growing to the batch size and making the
			// second of the chunks that take turns, about 5 batches each)
			// are start-up, not the steady receiving cost. chunks-made
			// says when a run still paid for a chunk.
			for range 32 {
				rec, err := batches.Next(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				rec.Release()
			}
			cpu0, f0, m0 := cpuSeconds(), minorFaults(), c.arena.made.Load()
			n := 0
			for b.Loop() {
				rec, err := batches.Next(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				n++
				rec.Release()
			}
			b.ReportMetric(1e3*(cpuSeconds()-cpu0)/float64(n), "cpu-ms/batch")
			b.ReportMetric(float64(minorFaults()-f0)/float64(n), "faults/batch")
			b.ReportMetric(float64(c.arena.made.Load()-m0), "chunks-made")
		})
	}
}
