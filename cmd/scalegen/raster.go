package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/geom"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// rasterMain measures the CPU cost of rasterising one mask onto the
// prototype grid, the way the loader does: polygons with Rasterizer.Dense
// after mapping their rings, RLE masks with Rasterizer.DenseRLE and the
// image→canvas affine. The instances are those of the first block of a
// shard set, scaled from the image onto an imgsz canvas. One goroutine
// does all the work, so the process's CPU time is the work's, whatever
// else the machine runs; stage wall times inside a loader are not.
func rasterMain(args []string) error {
	fs := flag.NewFlagSet("raster", flag.ContinueOnError)
	out := fs.String("out", "", "write the step record to `FILE`")
	step := fs.String("step", "raster", "step `NAME`")
	shards := fs.String("shards", "", "shard `DIR`")
	imgsz := fs.Int("imgsz", 128, "canvas side")
	stride := fs.Int("stride", 4, "mask grid stride")
	minCPU := fs.Float64("cpu", 1, "repeat passes until this many CPU seconds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *shards == "" {
		return errors.New("raster: want --out FILE --shards DIR")
	}
	src, err := pipeline.OpenShards(*shards)
	if err != nil {
		return fmt.Errorf("raster: %w", err)
	}
	defer src.Close()
	rows, err := src.ReadBlock(context.Background(), 0)
	if err != nil {
		return fmt.Errorf("raster: %w", err)
	}
	g, err := raster.NewGrid(*imgsz, *imgsz, *stride)
	if err != nil {
		return fmt.Errorf("raster: %w", err)
	}
	dst := make([]uint8, g.Cells())
	var z raster.Rasterizer
	var rings [][]float32
	var pts []float32
	var masks, rle, on int64
	pass := func(r *shard.Image) error {
		s := float64(*imgsz) / float64(max(r.Width, r.Height))
		m := geom.Scale(s, s)
		for i := range r.Instances {
			in := &r.Instances[i]
			clear(dst)
			if in.RLE != nil {
				rle++
				if err := z.DenseRLE(dst, g, raster.RLE{H: int(in.RLE.Height), W: int(in.RLE.Width), Counts: in.RLE.Counts}, m); err != nil {
					return err
				}
			} else {
				// Mapped into one reused buffer, as the loader's Labels do.
				n := 0
				for _, ring := range in.Polygons {
					n += len(ring)
				}
				if cap(pts) < n {
					pts = make([]float32, 0, 2*n)
				}
				pts, rings = pts[:0], rings[:0]
				for _, ring := range in.Polygons {
					k := len(pts)
					pts = m.AppendRing(pts, ring)
					rings = append(rings, pts[k:])
				}
				if err := z.Dense(dst, g, rings); err != nil {
					return err
				}
			}
			masks++
			on += int64(dst[len(dst)/2])
		}
		return nil
	}
	cpu0, _ := selfRusage()
	var cpu float64
	for cpu < *minCPU {
		for i := range rows {
			if err := pass(&rows[i]); err != nil {
				return fmt.Errorf("raster: row %d: %w", i, err)
			}
		}
		c, _ := selfRusage()
		cpu = c - cpu0
	}
	fmt.Fprintf(os.Stderr, "scalegen raster: %d masks (%d RLE) in %.2f CPU s: %.0f ns a mask\n", masks, rle, cpu, cpu/float64(masks)*1e9)
	return writeStep(*out, &Step{Step: *step, CPUS: cpu, Extra: map[string]float64{
		"masks": float64(masks), "rle_masks": float64(rle), "cpu_ns_per_mask": cpu / float64(masks) * 1e9,
	}})
}
