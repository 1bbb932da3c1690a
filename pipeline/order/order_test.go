package order

import (
	"slices"
	"testing"
)

func TestEpochIsPermutationOfAllRows(t *testing.T) {
	tests := []struct {
		name   string
		blocks []int
		window int
	}{
		{"even blocks", []int{10, 10, 10, 10, 10}, 20},
		{"ragged with empty", []int{3, 0, 17, 1, 9, 0, 25}, 8},
		{"one block", []int{50}, 512},
		{"window 1", []int{2, 3, 4}, 1},
		{"empty", nil, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := NewEpoch(7, 3, tc.blocks, tc.window)
			if err != nil {
				t.Fatal(err)
			}
			seen := make([]bool, ep.N)
			for p := int64(0); p < ep.N; p++ {
				r := ep.Row(p)
				if seen[r] {
					t.Fatalf("row %d twice", r)
				}
				seen[r] = true
			}
			var pos int64
			for i, w := range ep.Windows {
				if w.Start != pos {
					t.Fatalf("window %d starts at %d, want %d", i, w.Start, pos)
				}
				sum := 0
				for _, b := range w.Blocks {
					sum += tc.blocks[b]
				}
				if sum != w.Rows || (i < len(ep.Windows)-1 && w.Rows < tc.window) {
					t.Fatalf("window %d: rows %d, blocks sum %d, min %d", i, w.Rows, sum, tc.window)
				}
				// Every position of a window maps to a row of its own blocks.
				for p := w.Start; p < w.Start+int64(w.Rows); p++ {
					b, _ := ep.Locate(p)
					if !slices.Contains(w.Blocks, b) {
						t.Fatalf("position %d reads block %d outside its window", p, b)
					}
				}
				pos += int64(w.Rows)
			}
			if pos != ep.N {
				t.Fatalf("windows cover %d of %d", pos, ep.N)
			}
		})
	}
}

func orderOf(t *testing.T, seed uint64, e int, blocks []int) []int64 {
	ep, err := NewEpoch(seed, e, blocks, 16)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, ep.N)
	for p := range out {
		out[p] = ep.Row(int64(p))
	}
	return out
}

func TestOrderIsPureFunctionOfSeedAndEpoch(t *testing.T) {
	blocks := []int{8, 8, 8, 8, 8, 8, 8, 8}
	a, b := orderOf(t, 1, 0, blocks), orderOf(t, 1, 0, blocks)
	if !slices.Equal(a, b) {
		t.Fatal("same (seed, epoch) gave different orders")
	}
	if slices.Equal(a, orderOf(t, 1, 1, blocks)) || slices.Equal(a, orderOf(t, 2, 0, blocks)) {
		t.Fatal("order ignores epoch or seed")
	}
	ident := make([]int64, len(a))
	for i := range ident {
		ident[i] = int64(i)
	}
	if slices.Equal(a, ident) {
		t.Fatal("not shuffled")
	}
}

func TestRanksAreDisjointAndCoverForAnyWorld(t *testing.T) {
	for _, n := range []int64{0, 1, 7, 64, 101} {
		for _, start := range []int64{0, 3, n} {
			for world := 1; world <= 5; world++ {
				seen := map[int64]int{}
				for r := 0; r < world; r++ {
					first, step, count := RankPositions(start, n, r, world)
					for k := int64(0); k < count; k++ {
						seen[first+k*step]++
					}
				}
				for p := start; p < n; p++ {
					if seen[p] != 1 {
						t.Fatalf("n=%d start=%d W=%d: position %d taken %d times", n, start, world, p, seen[p])
					}
				}
				if len(seen) != int(max(n-start, 0)) {
					t.Fatalf("n=%d start=%d W=%d: %d positions taken", n, start, world, len(seen))
				}
			}
		}
	}
}

func TestPartnersStayInWindowAndAreDeterministic(t *testing.T) {
	ep, _ := NewEpoch(9, 2, []int{5, 5, 5, 5, 5, 5}, 10)
	for p := int64(0); p < ep.N; p++ {
		a := ep.Partners(nil, p, 3)
		b := ep.Partners(nil, p, 3)
		if !slices.Equal(a, b) {
			t.Fatal("partners differ between calls")
		}
		w := ep.Windows[ep.WindowOf(p)]
		for _, q := range a {
			if q < w.Start || q >= w.Start+int64(w.Rows) {
				t.Fatalf("partner %d of %d outside window [%d,%d)", q, p, w.Start, w.Start+int64(w.Rows))
			}
		}
	}
}

func TestIntNIsUniformEnough(t *testing.T) {
	r := NewRand(1, 2, 3, 4)
	var c [6]int
	for i := 0; i < 60000; i++ {
		c[IntN(r, 6)]++
	}
	for i, v := range c {
		if v < 9400 || v > 10600 {
			t.Fatalf("bucket %d: %d of 60000", i, v)
		}
	}
}
