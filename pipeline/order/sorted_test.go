package order

import (
	"slices"
	"testing"
)

// TestSortedEpochOrdersByKeyThenStorage: every row once, by increasing
// key, equal keys in storage order, the same for every seed and epoch,
// in one window; a key count other than the row count is refused.
func TestSortedEpochOrdersByKeyThenStorage(t *testing.T) {
	blocks := []int{3, 0, 4, 2}
	keys := []float64{0.75, 1.5, 0.75, 1, 0.5, 1.5, 0.75, 1, 0.5}
	want := []int64{4, 8, 0, 2, 6, 3, 7, 1, 5}
	for _, seed := range []uint64{0, 9} {
		for _, e := range []int{0, 3} {
			ep, err := NewSortedEpoch(seed, e, blocks, keys)
			if err != nil {
				t.Fatal(err)
			}
			if ep.N != 9 || len(ep.Windows) != 1 || !slices.Equal(ep.Windows[0].Blocks, []int{0, 2, 3}) {
				t.Fatalf("epoch %+v", ep)
			}
			var got []int64
			for p := int64(0); p < ep.N; p++ {
				got = append(got, ep.Row(p))
				if b, r := ep.Locate(p); ep.blockStart[b]+int64(r) != got[p] {
					t.Fatalf("position %d: block %d row %d, row id %d", p, b, r, got[p])
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d epoch %d: rows %v, want %v", seed, e, got, want)
			}
		}
	}
	if _, err := NewSortedEpoch(0, 0, blocks, keys[:8]); err == nil {
		t.Fatal("8 keys for 9 rows accepted")
	}
}
