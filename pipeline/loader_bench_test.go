package pipeline

import (
	"context"
	"testing"

	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// BenchmarkLoaderBatch measures one batch of 8 mosaics at imgsz 128 from
// synthetic JPEGs; allocs/op is allocations per batch in the steady state
// (the pools are warm after the first batches). The val=true case is the
// baseline: letterbox only, one decode per image and no HSV.
func BenchmarkLoaderBatch(b *testing.B) {
	rows := synth(b, 64, 0)
	for _, val := range []bool{true, false} {
		name := "train"
		if val {
			name = "val"
		}
		b.Run(name, func(b *testing.B) {
			a := augment.DefaultConfig()
			a.ImgSz = 128
			cfg := Config{BatchSize: 8, Augment: a, Val: val, Start: order.State{Seed: 1}, Epochs: 1 << 20}
			l, err := New(context.Background(), &SliceSource{Rows: rows, BlockSize: 16}, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			for i := 0; i < 4; i++ { // warm the pools and the cache
				rec, err := l.Next(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				rec.Release()
			}
			b.ReportAllocs()
			for b.Loop() {
				rec, err := l.Next(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				rec.Release()
			}
		})
	}
}
