package coco

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/formats/shard"
)

// FuzzParse feeds arbitrary documents to the streaming parser: it must
// never panic, must fail only with a *datasets.Problem, must not depend on
// where buffer refills fall, and what it keeps must be well formed.
//
//	go test -run '^$' -fuzz FuzzParse -fuzztime 3m -parallel 1 ./datasets/coco
func FuzzParse(f *testing.F) {
	matches, _ := filepath.Glob(filepath.Join(fixtures, "*", "annotations.json"))
	for _, m := range matches {
		if raw, err := os.ReadFile(m); err == nil {
			f.Add(raw, uint8(0))
		}
	}
	f.Add([]byte(`{"images":[{"id":1,"file_name":"a.png","width":4,"height":4}],"annotations":[{"id":1,"image_id":1,"category_id":1,"segmentation":{"size":[4,4],"counts":"04L4"},"area":1,"bbox":[0,0,1,1],"iscrowd":1}],"categories":[{"id":1,"name":"x"}]}`), uint8(3))
	// Issue 35: one image with more instances than shard.MaxInstances (Open
	// skips it whole when it judges the images; the parser keeps them).
	var dense bytes.Buffer
	dense.WriteString(`{"images":[{"id":1,"file_name":"a.png","width":4,"height":4}],"categories":[{"id":1,"name":"x"}],"annotations":[`)
	for k := 0; k <= shard.MaxInstances; k++ {
		if k > 0 {
			dense.WriteByte(',')
		}
		dense.WriteString(`{"id":` + itoa(k+1) + `,"image_id":1,"category_id":1,"segmentation":[[0,0,1,0,1,1]],"area":1,"bbox":[0,0,1,1],"iscrowd":0}`)
	}
	dense.WriteString("]}")
	f.Add(dense.Bytes(), uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, buf uint8) {
		for _, strict := range []bool{false, true} {
			p, err := parseBytes(raw, strict)
			if err != nil {
				var pr *datasets.Problem
				if !errors.As(err, &pr) || pr.Reason == "" {
					t.Fatalf("error %v is not a *datasets.Problem", err)
				}
				continue
			}
			st := &p.store
			for _, a := range st.Anns {
				if a.RingLo > a.RingHi || int(a.RingHi) > len(st.RingEnd) || a.RLELo > a.RLEHi || int(a.RLEHi) > len(st.Counts) {
					t.Fatalf("annotation %d: ranges out of bounds", a.ID)
				}
				for r := a.RingLo; r < a.RingHi; r++ {
					ring := st.Ring(r)
					if len(ring) < 6 || len(ring)%2 != 0 {
						t.Fatalf("annotation %d: kept a ring of %d values", a.ID, len(ring))
					}
					for _, v := range ring {
						if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
							t.Fatalf("annotation %d: kept %v", a.ID, v)
						}
					}
				}
				if a.HasRLE {
					var sum uint64
					for _, c := range st.Counts[a.RLELo:a.RLEHi] {
						sum += uint64(c)
					}
					if sum != uint64(a.RLEH)*uint64(a.RLEW) {
						t.Fatalf("annotation %d: RLE sums to %d for %dx%d", a.ID, sum, a.RLEH, a.RLEW)
					}
				} else if a.RingHi == a.RingLo {
					t.Fatalf("annotation %d: no geometry kept", a.ID)
				}
			}
		}
		if buf == 0 {
			return
		}
		want, werr := parseBytes(raw, false)
		defer func(n int) { scanBufferSize = n }(scanBufferSize)
		scanBufferSize = int(buf)
		got, gerr := parseBytes(raw, false)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
			t.Fatalf("buffer %d: error %v, with the default buffer %v", buf, gerr, werr)
		}
		if werr == nil && (!reflect.DeepEqual(got.store, want.store) || !reflect.DeepEqual(got.images, want.images) || !reflect.DeepEqual(got.cats, want.cats)) {
			t.Fatalf("buffer %d parses differently", buf)
		}
	})
}

// FuzzRLEString drives the compressed-RLE path of the reader (decoding by
// formats/rle plus the reader's size check) with arbitrary strings.
//
//	go test -run '^$' -fuzz FuzzRLEString -fuzztime 3m -parallel 1 ./datasets/coco
func FuzzRLEString(f *testing.F) {
	f.Add("=390k4", uint16(12), uint16(16))
	f.Add("0~~~", uint16(1), uint16(1))
	f.Add("", uint16(0), uint16(0))
	f.Add("PPPPPPPP\\\\", uint16(3), uint16(7))
	f.Fuzz(func(t *testing.T, counts string, h, w uint16) {
		var doc bytes.Buffer
		doc.WriteString(`{"images":[],"categories":[],"annotations":[{"id":1,"image_id":1,"category_id":1,"area":0,"bbox":[0,0,0,0],"iscrowd":1,"segmentation":{"size":[`)
		doc.WriteString(itoa(int(h)) + "," + itoa(int(w)) + `],"counts":`)
		doc.WriteString(jsonString(counts))
		doc.WriteString("}}]}")
		p, err := parseBytes(doc.Bytes(), false)
		if err != nil {
			var pr *datasets.Problem
			if !errors.As(err, &pr) {
				t.Fatalf("%v", err)
			}
			return
		}
		if len(p.store.Anns) == 1 {
			a := p.store.Anns[0]
			var sum uint64
			for _, c := range p.store.Counts[a.RLELo:a.RLEHi] {
				sum += uint64(c)
			}
			if !a.HasRLE || sum != uint64(h)*uint64(w) {
				t.Fatalf("kept an RLE summing to %d for %dx%d", sum, h, w)
			}
		} else if p.rep.Counts()[datasets.ReasonInvalidRLE] != 1 {
			t.Fatalf("annotation neither kept nor counted: %v", p.rep.Counts())
		}
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// jsonString quotes s for JSON, escaping every byte outside printable
// ASCII so invalid UTF-8 stays representable.
func jsonString(s string) string {
	const hex = "0123456789abcdef"
	b := []byte{'"'}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c >= 0x7f:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
