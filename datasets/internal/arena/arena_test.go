package arena

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"testing"
)

func TestStoreRingsAndRollback(t *testing.T) {
	var s Store
	s.Coords = append(s.Coords, 0, 0, 4, 0, 4, 3)
	s.CloseRing()
	m := s.Mark()
	s.Coords = append(s.Coords, 10, 10, 12, 10, 12, 12, 10, 12)
	s.CloseRing()
	if got := s.Ring(1); len(got) != 8 || got[0] != 10 {
		t.Fatalf("ring 1 = %v", got)
	}
	if bb := s.PolygonBBox(0, 2); bb != [4]float32{0, 0, 12, 12} {
		t.Errorf("bbox %v", bb)
	}
	if a := s.PolygonArea(0, 2); a != 6+4 {
		t.Errorf("area %v, want 10", a)
	}
	s.Rollback(m)
	if len(s.RingEnd) != 1 || len(s.Coords) != 6 || s.PolygonArea(0, 1) != 6 {
		t.Errorf("after rollback: %d rings, %d coords", len(s.RingEnd), len(s.Coords))
	}
	if bb := s.PolygonBBox(1, 1); bb != [4]float32{} {
		t.Errorf("empty bbox %v", bb)
	}
}

func TestDecodeHeader(t *testing.T) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 7, 5))); err != nil {
		t.Fatal(err)
	}
	h, err := DecodeHeader(bytes.NewReader(buf.Bytes()))
	if err != nil || h != (Header{Width: 7, Height: 5, Format: "png"}) {
		t.Errorf("header %+v, %v", h, err)
	}
	if _, err := DecodeHeader(bytes.NewReader([]byte("GIF89a"))); err == nil {
		t.Error("accepted a non-image")
	}
	if _, err := ReadHeader("/nonexistent/x.png", Limits{}); err == nil || !err.(*HeaderError).Missing {
		t.Errorf("missing file: %v", err)
	}
}

// A cancelled context must surface as its error whichever goroutine notices
// it first: the producer closing its queue early is not a clean end.
func TestOrderedCancel(t *testing.T) {
	for trial := range 3000 {
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		err := Ordered(ctx, 50, 1+trial%4, func(i int) int { return i }, func(i, v int) error {
			if i != v {
				t.Fatalf("consume(%d, %d)", i, v)
			}
			calls++
			if calls == 3 {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("trial %d: %v after %d calls", trial, err, calls)
		}
	}
	// Cancelling after the last item is no error: everything was consumed.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Ordered(ctx, 3, 2, func(i int) int { return i }, func(i, _ int) error {
		if i == 2 {
			cancel()
		}
		return nil
	}); err != nil {
		t.Fatalf("cancel after the last item: %v", err)
	}
}
