package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// decodeCompressedRLE is pycocotools' rleFrString, for the test.
func decodeCompressedRLE(s string) []uint32 {
	var cnts []int64
	for p := 0; p < len(s); {
		var x int64
		k, more := 0, true
		for more {
			c := int64(s[p]) - 48
			x |= (c & 0x1f) << (5 * k)
			more = c&0x20 != 0
			p++
			k++
			if !more && c&0x10 != 0 {
				x |= -1 << (5 * k)
			}
		}
		if len(cnts) > 2 {
			x += cnts[len(cnts)-2]
		}
		cnts = append(cnts, x)
	}
	out := make([]uint32, len(cnts))
	for i, c := range cnts {
		out[i] = uint32(c)
	}
	return out
}

func TestMasksRoundTrip(t *testing.T) {
	var s shaper
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		m := s.next(rng, 64, 64)
		var sum, on uint32
		for k, c := range m.counts {
			sum += c
			if k%2 == 1 {
				on += c
			}
		}
		if sum != 64*64 || int(on) != m.area || m.area == 0 {
			t.Fatalf("mask %d: counts sum %d, ON %d, area %d", i, sum, on, m.area)
		}
		// The JSON string form, unescaped by a JSON decoder, decodes back.
		var str string
		if err := json.Unmarshal(append(append([]byte{'"'}, appendCompressedRLE(nil, m.counts)...), '"'), &str); err != nil {
			t.Fatalf("mask %d: %v", i, err)
		}
		got := decodeCompressedRLE(str)
		if len(got) != len(m.counts) {
			t.Fatalf("mask %d: %d counts back, want %d", i, len(got), len(m.counts))
		}
		for k := range got {
			if got[k] != m.counts[k] {
				t.Fatalf("mask %d count %d: %d, want %d", i, k, got[k], m.counts[k])
			}
		}
	}
}

func TestGenerateWritesCOCO(t *testing.T) {
	dir := t.TempDir()
	for _, masks := range []string{"rle", "polygon"} {
		out := filepath.Join(dir, masks)
		if err := generate(genConfig{Out: out, Images: 3, Side: 32, PerImage: 5, Masks: masks, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, "annotations", "instances_train.json"))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Images      []map[string]any `json:"images"`
			Annotations []map[string]any `json:"annotations"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", masks, err)
		}
		if len(doc.Images) != 3 || len(doc.Annotations) != 15 {
			t.Fatalf("%s: %d images, %d annotations", masks, len(doc.Images), len(doc.Annotations))
		}
		if _, err := os.Stat(filepath.Join(out, "images", "000000003.jpg")); err != nil {
			t.Fatal(err)
		}
	}
}
