package arena

import (
	"math"
)

// Ann is one annotation, its geometry held by reference into a Store.
type Ann struct {
	ID         int64
	BBox       [4]float32
	Area       float32
	CategoryID int32
	Class      int32 // filled in once categories are known
	Crowd      bool
	HasRLE     bool
	RLEH, RLEW int32
	RingLo     uint32 // rings [RingLo, RingHi) of Store.RingEnd
	RingHi     uint32
	RLELo      uint32 // counts [RLELo, RLEHi) of Store.Counts
	RLEHi      uint32
}

// Store holds the geometry of every annotation of a dataset.
type Store struct {
	Coords  []float32 // x0,y0,x1,y1,… of every ring, back to back
	RingEnd []uint32  // ring r is Coords[RingStart(r):RingEnd[r]]
	Counts  []uint32  // uncompressed RLE counts, back to back
	Anns    []Ann
}

// RingStart is the first coordinate of ring r.
func (s *Store) RingStart(r uint32) uint32 {
	if r == 0 {
		return 0
	}
	return s.RingEnd[r-1]
}

// Ring returns ring r's coordinates (aliasing the store).
func (s *Store) Ring(r uint32) []float32 {
	return s.Coords[s.RingStart(r):s.RingEnd[r]]
}

// Mark is a position in a Store to roll back to.
type Mark struct{ coords, rings, counts int }

// Mark records the current end of every arena.
func (s *Store) Mark() Mark { return Mark{len(s.Coords), len(s.RingEnd), len(s.Counts)} }

// Rollback discards everything appended since m.
func (s *Store) Rollback(m Mark) {
	s.Coords = s.Coords[:m.coords]
	s.RingEnd = s.RingEnd[:m.rings]
	s.Counts = s.Counts[:m.counts]
}

// CloseRing ends the ring whose coordinates were appended since the previous
// ring ended.
func (s *Store) CloseRing() { s.RingEnd = append(s.RingEnd, uint32(len(s.Coords))) }

// PolygonBBox is the bounding box (x, y, w, h) of rings [lo, hi).
func (s *Store) PolygonBBox(lo, hi uint32) [4]float32 {
	minX, minY := math.Inf(1), math.Inf(1)
	maxX, maxY := math.Inf(-1), math.Inf(-1)
	for r := lo; r < hi; r++ {
		c := s.Ring(r)
		for i := 0; i+1 < len(c); i += 2 {
			x, y := float64(c[i]), float64(c[i+1])
			minX, maxX = math.Min(minX, x), math.Max(maxX, x)
			minY, maxY = math.Min(minY, y), math.Max(maxY, y)
		}
	}
	if minX > maxX {
		return [4]float32{}
	}
	return [4]float32{float32(minX), float32(minY), float32(maxX - minX), float32(maxY - minY)}
}

// PolygonArea is the shoelace area of rings [lo, hi), summed over parts.
func (s *Store) PolygonArea(lo, hi uint32) float64 {
	var total float64
	for r := lo; r < hi; r++ {
		c := s.Ring(r)
		n := len(c) / 2
		var a float64
		for i := 0; i < n; i++ {
			j := (i + 1) % n
			a += float64(c[2*i])*float64(c[2*j+1]) - float64(c[2*j])*float64(c[2*i+1])
		}
		total += math.Abs(a) / 2
	}
	return total
}
