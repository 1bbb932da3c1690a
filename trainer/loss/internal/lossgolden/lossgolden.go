// Package lossgolden reads the loss goldens (goldens/loss, from ../shared
// or its copy in internal/testenv/shared/testdata: batch.safetensors and
// outputs.safetensors; yolo26n-seg at 128 px, batch 2, 80 classes, 32
// coefficients) as plain arrays, for the tests of the
// loss and of its device kernels. It returns no trainer/loss types, so
// that the loss's own in-package tests can import it; each test turns the
// arrays into the loss's types itself.
package lossgolden

import (
	"fmt"
	"path/filepath"

	"github.com/segpipe/segpipe/formats/safetensors"
)

// Level is one detection level: its grid and stride in pixels.
type Level struct {
	H, W   int
	Stride float32
}

// Case is the goldens' batch, in the loader's layout, and train outputs.
type Case struct {
	// The geometry.
	B, NC, NM                  int
	Levels                     []Level
	ProtoH, ProtoW, SemH, SemW int
	// The head's train outputs: one branch (the one-to-one outputs equal
	// the one-to-many ones at init), the prototypes and the semantic
	// logits.
	Boxes, Scores, Coef, Proto, Semseg []float32
	// The targets: instances per image, classes, xyxy boxes in pixels,
	// and each instance's whole mask on the prototype grid (overlaps
	// and all): the ellipse inscribed in its mask-space box (the goldens'
	// README).
	BoxesPerImage []int
	Classes       []int32
	TargetBoxes   []float32
	Masks         []uint8
	// Overlap is the reference's overlap map (uint8, B×ProtoH×ProtoW),
	// which the loss's composition of Masks must reproduce.
	Overlap []uint8
}

// Read reads the goldens in dir.
func Read(dir string) (*Case, error) {
	bf, err := safetensors.ReadFile(filepath.Join(dir, "batch.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("loss goldens: %w", err)
	}
	of, err := safetensors.ReadFile(filepath.Join(dir, "outputs.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("loss goldens: %w", err)
	}
	f32 := func(f *safetensors.File, name string) []float32 {
		v, _, e := f.Float32s(name)
		if e != nil && err == nil {
			err = fmt.Errorf("loss goldens: %s: %w", name, e)
		}
		return v
	}
	c := &Case{
		B: 2, NC: 80, NM: 32,
		Levels: []Level{{16, 16, 8}, {8, 8, 16}, {4, 4, 32}},
		ProtoH: 32, ProtoW: 32, SemH: 16, SemW: 16,
	}
	bidx, cls, xywh := f32(bf, "batch_idx"), f32(bf, "cls"), f32(bf, "bboxes")
	m, e := bf.Get("masks")
	if e != nil && err == nil {
		err = fmt.Errorf("loss goldens: masks: %w", e)
	}
	c.Proto, c.Semseg = f32(of, "proto"), f32(of, "semseg")
	c.Boxes, c.Scores, c.Coef = f32(of, "boxes"), f32(of, "scores"), f32(of, "mask_coefficient")
	if err != nil {
		return nil, err
	}
	if len(cls) != len(bidx) || len(xywh) != 4*len(bidx) {
		return nil, fmt.Errorf("loss goldens: %d batch indices, %d classes, %d box values", len(bidx), len(cls), len(xywh))
	}
	c.BoxesPerImage = make([]int, c.B)
	for k := range bidx {
		b := int(bidx[k])
		if b < 0 || b >= c.B {
			return nil, fmt.Errorf("loss goldens: instance %d in image %d of %d", k, b, c.B)
		}
		c.BoxesPerImage[b]++
		c.Classes = append(c.Classes, int32(cls[k]))
		cx, cy, w, h := xywh[4*k]*128, xywh[4*k+1]*128, xywh[4*k+2]*128, xywh[4*k+3]*128
		c.TargetBoxes = append(c.TargetBoxes, cx-w/2, cy-h/2, cx+w/2, cy+h/2)
		x1, y1, x2, y2 := (cx-w/2)/4, (cy-h/2)/4, (cx+w/2)/4, (cy+h/2)/4
		ex, ey, ax, ay := (x1+x2)/2, (y1+y2)/2, (x2-x1)/2, (y2-y1)/2
		for r := range c.ProtoH {
			for col := range c.ProtoW {
				dx, dy := (float32(col)+0.5-ex)/ax, (float32(r)+0.5-ey)/ay
				var bit uint8
				if dx*dx+dy*dy <= 1 {
					bit = 1
				}
				c.Masks = append(c.Masks, bit)
			}
		}
	}
	c.Overlap = m.Data
	return c, nil
}
