// Command gen_windowed writes the fixture that python/tests/test_windowed.py
// checks the numpy mask expander against: windowed masks as the server sends
// them (per instance its tight window on the grid, per image its bytes in a
// binary column) and the dense stack that raster.Expand, the function the Go
// client's expander calls, makes of them. Cases the Go expander refuses are
// written with "error": true and no stack.
//
//	go run ./python/tests/gen_windowed                 # rewrite the fixture
//	go run ./python/tests/gen_windowed -out FILE       # write elsewhere (CI compares)
package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/segpipe/segpipe/pipeline/raster"
)

type fixtureCase struct {
	Name string `json:"name"`
	Hp   int    `json:"hp"`
	Wp   int    `json:"wp"`
	// BoxesPerImage splits the instances by image.
	BoxesPerImage []int32 `json:"boxes_per_image"`
	// Windows holds x0, y0, w, h per instance, flat.
	Windows []int32 `json:"windows"`
	// DataOffsets and Data are the mask_data binary column: image i's
	// bytes are Data[DataOffsets[i]:DataOffsets[i+1]].
	DataOffsets []int32 `json:"data_offsets"`
	Data        string  `json:"data"`            // base64
	Dense       string  `json:"dense,omitempty"` // base64 of the (sum_N, Hp, Wp) stack
	Error       bool    `json:"error,omitempty"`
}

type fixture struct {
	About string        `json:"about"`
	Cases []fixtureCase `json:"cases"`
}

// tight returns the smallest window holding every non-zero cell of a plane.
func tight(p []byte, hp, wp int) raster.Window {
	x0, y0, x1, y1 := wp, hp, -1, -1
	for r := 0; r < hp; r++ {
		for c := 0; c < wp; c++ {
			if p[r*wp+c] != 0 {
				x0, y0, x1, y1 = min(x0, c), min(y0, r), max(x1, c), max(y1, r)
			}
		}
	}
	if x1 < 0 {
		return raster.Window{}
	}
	return raster.Window{X0: int32(x0), Y0: int32(y0), W: int32(x1 - x0 + 1), H: int32(y1 - y0 + 1)}
}

// blob draws a random {0,1} mask: a filled rectangle with holes, clipped to
// the grid; kind 0 is empty, kind 1 the whole grid.
func blob(rng *rand.Rand, hp, wp, kind int) []byte {
	p := make([]byte, hp*wp)
	switch kind {
	case 0:
		return p
	case 1:
		for i := range p {
			p[i] = 1
		}
		return p
	}
	x0, y0 := rng.IntN(wp), rng.IntN(hp)
	x1, y1 := min(wp, x0+1+rng.IntN(wp)), min(hp, y0+1+rng.IntN(hp))
	for r := y0; r < y1; r++ {
		for c := x0; c < x1; c++ {
			if rng.IntN(5) != 0 {
				p[r*wp+c] = 1
			}
		}
	}
	return p
}

// encode makes the windowed form of per-image planes, with pad spare bytes
// before the first image's data (a sliced binary column).
func encode(name string, hp, wp int, images [][][]byte, pad int) (fixtureCase, []raster.Window, []byte) {
	fc := fixtureCase{Name: name, Hp: hp, Wp: wp, DataOffsets: []int32{int32(pad)}}
	data := make([]byte, pad)
	var wins []raster.Window
	for _, planes := range images {
		fc.BoxesPerImage = append(fc.BoxesPerImage, int32(len(planes)))
		for _, p := range planes {
			w := tight(p, hp, wp)
			wins = append(wins, w)
			fc.Windows = append(fc.Windows, w.X0, w.Y0, w.W, w.H)
			for r := w.Y0; r < w.Y0+w.H; r++ {
				o := int(r)*wp + int(w.X0)
				data = append(data, p[o:o+int(w.W)]...)
			}
		}
		fc.DataOffsets = append(fc.DataOffsets, int32(len(data)))
	}
	if fc.Windows == nil {
		fc.Windows = []int32{}
	}
	fc.Data = base64.StdEncoding.EncodeToString(data)
	return fc, wins, data[pad:]
}

// expand runs the Go expander and records its answer.
func expand(fc fixtureCase, wins []raster.Window, data []byte, want []byte) (fixtureCase, error) {
	g := raster.Grid{Rows: fc.Hp, Cols: fc.Wp, Stride: 4}
	dst := make([]byte, len(wins)*g.Cells())
	if err := raster.Expand(dst, g, wins, data); err != nil {
		fc.Error = true
		return fc, nil
	}
	if want != nil && string(dst) != string(want) {
		return fc, fmt.Errorf("case %s: raster.Expand does not give back the encoded planes", fc.Name)
	}
	fc.Dense = base64.StdEncoding.EncodeToString(dst)
	return fc, nil
}

func build() (*fixture, error) {
	rng := rand.New(rand.NewPCG(17, 4))
	f := &fixture{About: "windowed masks and raster.Expand's dense stack; written by go run ./python/tests/gen_windowed, never edit"}
	add := func(fc fixtureCase, wins []raster.Window, data, want []byte) error {
		fc, err := expand(fc, wins, data, want)
		if err != nil {
			return err
		}
		f.Cases = append(f.Cases, fc)
		return nil
	}
	type shape struct {
		name        string
		hp, wp, pad int
		perImage    []int
	}
	for _, s := range []shape{
		{"one instance", 8, 8, 0, []int{1}},
		{"batch", 20, 16, 0, []int{3, 0, 5, 1}},
		{"no instances", 12, 12, 0, []int{0, 0}},
		{"sliced data column", 16, 24, 7, []int{2, 4}},
		{"wide grid", 6, 40, 0, []int{6}},
		{"tall grid", 40, 6, 3, []int{2, 2, 2}},
		{"prototype grid 160", 160, 160, 0, []int{2, 3}},
	} {
		var images [][][]byte
		var all []byte
		for i, k := range s.perImage {
			var planes [][]byte
			for j := 0; j < k; j++ {
				kind := 2 + rng.IntN(6)
				if (i+j)%5 == 1 {
					kind = 0 // an instance whose mask is empty
				}
				if s.name == "batch" && i == 2 && j == 0 {
					kind = 1 // one that fills the grid
				}
				p := blob(rng, s.hp, s.wp, kind)
				planes = append(planes, p)
				all = append(all, p...)
			}
			images = append(images, planes)
		}
		fc, wins, data := encode(s.name, s.hp, s.wp, images, s.pad)
		if err := add(fc, wins, data, all); err != nil {
			return nil, err
		}
	}
	// Refused: a window past the grid's edge, and data one byte short.
	p := blob(rng, 10, 10, 3)
	fc, wins, data := encode("window outside the grid", 10, 10, [][][]byte{{p}}, 0)
	wins[0].X0 = int32(10 - wins[0].W + 1)
	fc.Windows[0] = wins[0].X0
	if err := add(fc, wins, data, nil); err != nil {
		return nil, err
	}
	fc, wins, data = encode("data one byte short", 10, 10, [][][]byte{{blob(rng, 10, 10, 1)}}, 0)
	data = data[:len(data)-1]
	fc.DataOffsets[1]--
	fc.Data = base64.StdEncoding.EncodeToString(data)
	if err := add(fc, wins, data, nil); err != nil {
		return nil, err
	}
	for _, c := range f.Cases[len(f.Cases)-2:] {
		if !c.Error {
			return nil, fmt.Errorf("case %s: raster.Expand accepted it", c.Name)
		}
	}
	return f, nil
}

func main() {
	out := flag.String("out", "python/tests/testdata/windowed.json", "fixture `FILE` to write")
	flag.Parse()
	f, err := build()
	if err == nil {
		var b []byte
		b, err = json.MarshalIndent(f, "", " ")
		if err == nil {
			err = os.WriteFile(*out, append(b, '\n'), 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen_windowed:", err)
		os.Exit(1)
	}
}
