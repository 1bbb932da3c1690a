// Command rulecheck rasterises instances read as JSON on stdin and writes
// their dense masks to stdout, back to back (rows·cols bytes each), so that
// a test in another language can compare a rule with its reference:
//
//	{"rule": "ultralytics", "w": 640, "h": 640, "stride": 4,
//	 "instances": [[[x0, y0, x1, y1, ...], ...], ...]}
//
// Each instance is a list of rings of float32 canvas coordinates. The
// masks come from AppendWindow and are expanded, so the windowed form is
// what is checked; a mismatch with Dense is an error.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/segpipe/segpipe/pipeline/raster"
)

type request struct {
	Rule      string        `json:"rule"`
	W         int           `json:"w"`
	H         int           `json:"h"`
	Stride    int           `json:"stride"`
	Instances [][][]float32 `json:"instances"`
}

func main() {
	if err := run(); err != nil {
		slog.Error("rulecheck", "err", err)
		os.Exit(1)
	}
}

func run() error {
	var req request
	if err := json.NewDecoder(bufio.NewReader(os.Stdin)).Decode(&req); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	rule, err := raster.ParseRule(req.Rule)
	if err != nil {
		return err
	}
	g, err := raster.NewGrid(req.W, req.H, req.Stride)
	if err != nil {
		return err
	}
	z := raster.Rasterizer{Rule: rule}
	var wins []raster.Window
	var data []uint8
	for i, inst := range req.Instances {
		if wins, data, err = z.AppendWindow(wins, data, g, inst); err != nil {
			return fmt.Errorf("instance %d: %w", i, err)
		}
	}
	out := make([]uint8, len(wins)*g.Cells())
	if err := raster.Expand(out, g, wins, data); err != nil {
		return err
	}
	dense := make([]uint8, g.Cells())
	for i, inst := range req.Instances {
		if err := z.Dense(dense, g, inst); err != nil {
			return fmt.Errorf("instance %d: %w", i, err)
		}
		if !bytes.Equal(dense, out[i*g.Cells():(i+1)*g.Cells()]) {
			return fmt.Errorf("instance %d: windowed and dense masks differ", i)
		}
	}
	w := bufio.NewWriter(os.Stdout)
	if _, err := w.Write(out); err != nil {
		return err
	}
	return w.Flush()
}
