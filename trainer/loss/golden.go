package loss

import (
	"fmt"
	"path/filepath"

	"github.com/segpipe/segpipe/formats/safetensors"
)

// ReadGoldenCase reads the loss goldens' batch and train outputs from dir
// (the layout of ../shared/goldens/loss: batch.safetensors and
// outputs.safetensors, yolo26n-seg at 128 px, batch 2, 80 classes, 32
// coefficients) into this package's types, the batch in the loader's
// layout: each instance's whole mask, overlaps and all, the ellipse
// inscribed in its mask-space box (the goldens' README); the loss
// composes them into the reference's overlap map, which is returned as
// overlap (uint8, B×32×32) to check that against. The one-to-one outputs
// equal the one-to-many ones at init (separate slices). It is the one reading of the
// goldens that the loss's tests and its device twins' tests compare with.
func ReadGoldenCase(dir string) (out *Outputs, tg *Targets, overlap []uint8, err error) {
	bf, err := safetensors.ReadFile(filepath.Join(dir, "batch.safetensors"))
	if err != nil {
		return nil, nil, nil, err
	}
	of, err := safetensors.ReadFile(filepath.Join(dir, "outputs.safetensors"))
	if err != nil {
		return nil, nil, nil, err
	}
	f32 := func(f *safetensors.File, name string) []float32 {
		v, _, e := f.Float32s(name)
		if e != nil && err == nil {
			err = fmt.Errorf("loss goldens: %s: %w", name, e)
		}
		return v
	}
	g := Geometry{
		B: 2, NC: 80, NM: 32,
		Levels: []Level{{16, 16, 8}, {8, 8, 16}, {4, 4, 32}},
		ProtoH: 32, ProtoW: 32, SemH: 16, SemW: 16,
	}
	bidx, cls, xywh := f32(bf, "batch_idx"), f32(bf, "cls"), f32(bf, "bboxes")
	m, e := bf.Get("masks")
	if e != nil && err == nil {
		err = fmt.Errorf("loss goldens: masks: %w", e)
	}
	out = &Outputs{Geometry: g, Proto: f32(of, "proto"), Semseg: f32(of, "semseg")}
	out.One2Many = Branch{f32(of, "boxes"), f32(of, "scores"), f32(of, "mask_coefficient")}
	out.One2One = Branch{f32(of, "boxes"), f32(of, "scores"), f32(of, "mask_coefficient")} // its own copy
	if err != nil {
		return nil, nil, nil, err
	}
	if len(cls) != len(bidx) || len(xywh) != 4*len(bidx) {
		return nil, nil, nil, fmt.Errorf("loss goldens: %d batch indices, %d classes, %d box values", len(bidx), len(cls), len(xywh))
	}
	tg = &Targets{BoxesPerImage: make([]int, g.B)}
	for k := range bidx {
		b := int(bidx[k])
		if b < 0 || b >= g.B {
			return nil, nil, nil, fmt.Errorf("loss goldens: instance %d in image %d of %d", k, b, g.B)
		}
		tg.BoxesPerImage[b]++
		tg.Classes = append(tg.Classes, int32(cls[k]))
		cx, cy, w, h := xywh[4*k]*128, xywh[4*k+1]*128, xywh[4*k+2]*128, xywh[4*k+3]*128
		tg.Boxes = append(tg.Boxes, cx-w/2, cy-h/2, cx+w/2, cy+h/2)
		x1, y1, x2, y2 := (cx-w/2)/4, (cy-h/2)/4, (cx+w/2)/4, (cy+h/2)/4
		ex, ey, ax, ay := (x1+x2)/2, (y1+y2)/2, (x2-x1)/2, (y2-y1)/2
		for r := range g.ProtoH {
			for c := range g.ProtoW {
				dx, dy := (float32(c)+0.5-ex)/ax, (float32(r)+0.5-ey)/ay
				var bit uint8
				if dx*dx+dy*dy <= 1 {
					bit = 1
				}
				tg.Masks = append(tg.Masks, bit)
			}
		}
	}
	return out, tg, m.Data, nil
}
