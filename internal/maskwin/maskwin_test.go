package maskwin

import (
	"strings"
	"testing"
)

func flat(v []int) func(int) (int, int, int, int) {
	return func(i int) (int, int, int, int) { return v[4*i], v[4*i+1], v[4*i+2], v[4*i+3] }
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name       string
		rows, cols int
		wins       []int
		data       int
		want       string // "" for nil
	}{
		{"none", 4, 4, nil, 0, ""},
		{"one filling the grid", 4, 5, []int{0, 0, 5, 4}, 20, ""},
		{"two, then empty", 4, 4, []int{1, 1, 2, 2, 3, 3, 1, 1, 0, 0, 0, 0}, 5, ""},
		{"empty window at the edge", 4, 4, []int{4, 4, 0, 0}, 0, ""},
		{"right edge out", 4, 4, []int{3, 0, 2, 1}, 2, "outside grid"},
		{"bottom edge out", 4, 4, []int{0, 3, 1, 2}, 2, "outside grid"},
		{"negative origin", 4, 4, []int{-1, 0, 1, 1}, 1, "outside grid"},
		{"negative size", 4, 4, []int{1, 1, -1, 1}, 0, "outside grid"},
		{"huge origin, overflow-safe", 4, 4, []int{1<<62 + 1, 0, 1 << 62, 1}, 1, "outside grid"},
		{"data short", 4, 4, []int{0, 0, 2, 2}, 3, "needs 4 bytes"},
		{"data left over", 4, 4, []int{0, 0, 2, 2}, 5, "windows use 4 bytes, data has 5"},
		{"negative grid", -1, 4, nil, 0, "grid"},
	} {
		err := Check(c.rows, c.cols, len(c.wins)/4, flat(c.wins), c.data)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// FuzzCheck holds Check to a brute-force reading of the rule: every cell
// of every window on the grid, the data consumed exactly.
func FuzzCheck(f *testing.F) {
	f.Add(4, 4, []byte{0, 0, 2, 2, 1, 1, 3, 3}, 13)
	f.Add(3, 5, []byte{2, 1, 3, 2}, 6)
	f.Fuzz(func(t *testing.T, rows, cols int, raw []byte, data int) {
		rows, cols = rows%32, cols%32
		wins := make([]int, len(raw)/4*4)
		for i := range wins {
			wins[i] = int(int8(raw[i])) // negatives too
		}
		err := Check(rows, cols, len(wins)/4, flat(wins), data)
		ok := rows >= 0 && cols >= 0
		used := 0
		for i := 0; ok && i < len(wins); i += 4 {
			x0, y0, w, h := wins[i], wins[i+1], wins[i+2], wins[i+3]
			if w < 0 || h < 0 {
				ok = false
				break
			}
			for y := y0; y < y0+h && ok; y++ {
				for x := x0; x < x0+w; x++ {
					if x < 0 || y < 0 || x >= cols || y >= rows {
						ok = false
						break
					}
				}
			}
			if w == 0 || h == 0 { // an empty window still has its origin on the grid's closed range
				ok = ok && x0 >= 0 && y0 >= 0 && x0 <= cols-w && y0 <= rows-h
			}
			used += w * h
		}
		ok = ok && used == data
		if ok != (err == nil) {
			t.Fatalf("rows %d cols %d windows %v data %d: Check %v, brute force ok=%v", rows, cols, wins, data, err, ok)
		}
	})
}
