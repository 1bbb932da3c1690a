package raster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// checkAgainstBrute rasterises rings both ways (dense and windowed) with z
// and compares with the oracle; it returns a description of the first
// difference.
func checkAgainstBrute(z *Rasterizer, g Grid, rings [][]float32) error {
	want := bruteDense(g, rings)
	got := make([]uint8, g.Cells())
	for i := range got {
		got[i] = 7 // Dense must overwrite every byte
	}
	if err := z.Dense(got, g, rings); err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				return fmt.Errorf("dense differs first at row %d col %d: got %d want %d\n%s",
					i/g.Cols, i%g.Cols, got[i], want[i], diffPicture(g, got, want))
			}
		}
	}
	// Fill paints onto whatever is there: a union with the background.
	for i := range got {
		got[i] = uint8(i % 3 % 2)
	}
	if err := z.Fill(got, g, rings); err != nil {
		return err
	}
	for i := range got {
		if got[i] != want[i]|uint8(i%3%2) {
			return fmt.Errorf("fill differs at row %d col %d", i/g.Cols, i%g.Cols)
		}
	}
	wantW, wantB := tightWindow(g, want)
	prefix := []uint8{9, 9, 9}
	wins, data, err := z.AppendWindow([]Window{{1, 2, 3, 4}}, prefix, g, rings)
	if err != nil {
		return err
	}
	if len(wins) != 2 || wins[0] != (Window{1, 2, 3, 4}) || wins[1] != wantW {
		return fmt.Errorf("window: got %+v, want [{1 2 3 4} %+v]", wins, wantW)
	}
	if !bytes.Equal(data[:3], prefix) || !bytes.Equal(data[3:], wantB) {
		return fmt.Errorf("window bytes differ: got %v want %v", data[3:], wantB)
	}
	return nil
}

func diffPicture(g Grid, got, want []uint8) string {
	var b bytes.Buffer
	for r := 0; r < g.Rows; r++ {
		for c := 0; c < g.Cols; c++ {
			i := r*g.Cols + c
			switch {
			case got[i] == want[i] && got[i] == 1:
				b.WriteByte('#')
			case got[i] == want[i]:
				b.WriteByte('.')
			case got[i] == 1:
				b.WriteByte('+') // extra
			default:
				b.WriteByte('-') // missing
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestRasterizeMatchesBruteForceOnRandomInstances(t *testing.T) {
	n := 30000
	if testing.Short() {
		n = 3000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var z Rasterizer // one reused rasterizer also checks scratch reuse
	for i := 0; i < n; i++ {
		g := genGrid(rng)
		rings := genInstance(rng, g)
		if err := checkAgainstBrute(&z, g, rings); err != nil {
			t.Fatalf("instance %d grid %+v rings %v: %v", i, g, rings, err)
		}
	}
}

func TestRasterizeCases(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	g4 := Grid{Rows: 8, Cols: 8, Stride: 4}
	g1 := Grid{Rows: 6, Cols: 6, Stride: 1}
	cases := []struct {
		name  string
		g     Grid
		rings [][]float32
		on    int // expected ON cells; -1 to rely on the oracle only
	}{
		{"square on centres", g1, [][]float32{{1.5, 1.5, 4.5, 1.5, 4.5, 4.5, 1.5, 4.5}}, 9},
		{"square between centres", g1, [][]float32{{1, 1, 4, 1, 4, 4, 1, 4}}, 9},
		{"whole canvas", g4, [][]float32{{0, 0, 32, 0, 32, 32, 0, 32}}, 64},
		{"bigger than canvas", g4, [][]float32{{-1e6, -1e6, 1e6, -1e6, 1e6, 1e6, -1e6, 1e6}}, 64},
		{"outside canvas", g4, [][]float32{{40, 40, 50, 40, 50, 50}}, 0},
		{"negative", g4, [][]float32{{-10, -10, -1, -10, -1, -1}}, 0},
		{"tiny inside one cell", g4, [][]float32{{1, 1, 1.5, 1, 1.5, 1.5}}, 0},
		{"tiny around a centre", g4, [][]float32{{1.9, 1.9, 2.1, 1.9, 2.1, 2.1, 1.9, 2.1}}, 1},
		{"bow tie", g1, [][]float32{{0, 0, 6, 6, 6, 0, 0, 6}}, -1},
		{"two parts union", g1, [][]float32{{0, 0, 4, 0, 4, 4, 0, 4}, {2, 2, 6, 2, 6, 6, 2, 6}}, 28},
		{"same part twice stays on", g1, [][]float32{{0, 0, 4, 0, 4, 4, 0, 4}, {0, 0, 4, 0, 4, 4, 0, 4}}, 16},
		{"empty and short rings", g1, [][]float32{{}, {1}, {1, 2}, {1, 2, 3, 4}}, 0},
		{"horizontal line", g1, [][]float32{{0, 2.5, 6, 2.5}}, 0},
		{"collinear and duplicates", g1, [][]float32{{0, 0, 2, 0, 2, 0, 4, 0, 4, 4, 4, 4, 0, 4}}, 16},
		{"nan vertex", g1, [][]float32{{0, 0, nan, 3, 6, 0, 6, 6, 0, 6}}, -1},
		{"all nan", g1, [][]float32{{nan, nan, nan, nan, nan, nan}}, 0},
		{"inf vertex", g1, [][]float32{{0, 0, inf, 3, 6, 6, 0, 6}}, -1},
		{"inf y", g1, [][]float32{{0, 0, 3, inf, 6, 0, 3, -inf}}, -1},
		{"max float", g1, [][]float32{{-math.MaxFloat32, -math.MaxFloat32, math.MaxFloat32, 0, 0, math.MaxFloat32}}, -1},
		{"empty grid", Grid{Rows: 0, Cols: 0, Stride: 4}, [][]float32{{0, 0, 6, 0, 6, 6}}, 0},
	}
	var z Rasterizer
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkAgainstBrute(&z, tc.g, tc.rings); err != nil {
				t.Fatal(err)
			}
			if tc.on >= 0 {
				dst := make([]uint8, tc.g.Cells())
				if err := z.Dense(dst, tc.g, tc.rings); err != nil {
					t.Fatal(err)
				}
				if got := bytes.Count(dst, []byte{1}); got != tc.on {
					t.Fatalf("%d cells ON, want %d", got, tc.on)
				}
			}
		})
	}
}

func TestDenseAndWindowErrors(t *testing.T) {
	var z Rasterizer
	ring := [][]float32{{0, 0, 8, 0, 8, 8}}
	if err := z.Dense(make([]uint8, 15), Grid{Rows: 4, Cols: 4, Stride: 2}, ring); err == nil {
		t.Fatal("short dst accepted")
	}
	if err := z.Fill(make([]uint8, 17), Grid{Rows: 4, Cols: 4, Stride: 2}, ring); err == nil {
		t.Fatal("long dst accepted")
	}
	for _, g := range []Grid{{Rows: 4, Cols: 4}, {Rows: -1, Cols: 4, Stride: 4}, {Rows: 1 << 40, Cols: 4, Stride: 1}} {
		if err := z.Dense(nil, g, ring); !errors.Is(err, ErrGrid) {
			t.Fatalf("grid %+v: err %v, want ErrGrid", g, err)
		}
		if _, _, err := z.AppendWindow(nil, nil, g, ring); !errors.Is(err, ErrGrid) {
			t.Fatalf("grid %+v: err %v, want ErrGrid", g, err)
		}
	}
	if _, err := NewGrid(640, 640, 0); !errors.Is(err, ErrGrid) {
		t.Fatalf("stride 0: %v", err)
	}
	if g, err := NewGrid(642, 480, 4); err != nil || g != (Grid{Rows: 120, Cols: 160, Stride: 4}) {
		t.Fatalf("NewGrid = %+v, %v", g, err)
	}
}

func TestExpandRebuildsDenseStack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	g := Grid{Rows: 24, Cols: 31, Stride: 4}
	var z Rasterizer
	var wins []Window
	var data []uint8
	var want []uint8
	for i := 0; i < 200; i++ {
		rings := genInstance(rng, g)
		var err error
		if wins, data, err = z.AppendWindow(wins, data, g, rings); err != nil {
			t.Fatal(err)
		}
		want = append(want, bruteDense(g, rings)...)
	}
	got := bytes.Repeat([]byte{5}, len(want))
	if err := Expand(got, g, wins, data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("expanded stack differs from the oracle")
	}
	dense := len(want)
	t.Logf("200 random instances: dense %d bytes, windowed %d bytes + %d windows", dense, len(data), len(wins))
}

func TestExpandRejectsBadWindows(t *testing.T) {
	g := Grid{Rows: 4, Cols: 4, Stride: 1}
	cases := []struct {
		name string
		wins []Window
		data []uint8
		dst  int
	}{
		{"outside", []Window{{X0: 3, Y0: 0, W: 2, H: 1}}, []uint8{1, 1}, 16},
		{"negative", []Window{{X0: -1, Y0: 0, W: 1, H: 1}}, []uint8{1}, 16},
		{"negative size", []Window{{X0: 0, Y0: 0, W: -1, H: -1}}, []uint8{1}, 16},
		{"short data", []Window{{X0: 0, Y0: 0, W: 2, H: 2}}, []uint8{1, 1, 1}, 16},
		{"extra data", []Window{{X0: 0, Y0: 0, W: 1, H: 1}}, []uint8{1, 1}, 16},
		{"short dst", []Window{{X0: 0, Y0: 0, W: 1, H: 1}}, []uint8{1}, 15},
	}
	for _, tc := range cases {
		if err := Expand(make([]uint8, tc.dst), g, tc.wins, tc.data); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	g := Grid{Rows: 160, Cols: 160, Stride: 4}
	rng := rand.New(rand.NewPCG(5, 6))
	inst := make([][][]float32, 50)
	for i := range inst {
		inst[i] = genInstance(rng, g)
	}
	var z Rasterizer
	dst := make([]uint8, g.Cells())
	wins := make([]Window, 0, len(inst))
	data := make([]uint8, 0, len(inst)*g.Cells())
	run := func() {
		wins, data = wins[:0], data[:0]
		for _, rings := range inst {
			if err := z.Dense(dst, g, rings); err != nil {
				t.Fatal(err)
			}
			if err := z.Fill(dst, g, rings); err != nil {
				t.Fatal(err)
			}
			wins, data, _ = z.AppendWindow(wins, data, g, rings)
		}
	}
	if a := testing.AllocsPerRun(10, run); a != 0 {
		t.Fatalf("%v allocations per run", a)
	}
	stack := make([]uint8, len(wins)*g.Cells())
	if a := testing.AllocsPerRun(10, func() { _ = Expand(stack, g, wins, data) }); a != 0 {
		t.Fatalf("Expand: %v allocations per run", a)
	}
}

// FuzzRasterize compares Dense and AppendWindow with the oracle on
// instances decoded from the fuzz input. Coordinates are either multiples
// of 1/8 (which land exactly on centres, rows and pixel corners) or raw
// float32 bits (NaN, Inf, subnormals, huge values).
func FuzzRasterize(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 64, 0, 0, 0, 64, 0, 64, 0}, uint8(8), uint8(8), uint8(4), false)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 128, 127, 0, 0, 128, 255, 0, 0, 192, 127, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(5), uint8(5), uint8(1), true)
	f.Add([]byte{20, 0, 20, 0, 255, 0, 20, 0, 20, 0, 255, 0, 255, 255, 30, 1}, uint8(16), uint8(16), uint8(2), false)
	var z Rasterizer
	f.Fuzz(func(t *testing.T, data []byte, rows, cols, stride uint8, raw bool) {
		g := Grid{Rows: int(rows % 48), Cols: int(cols % 48), Stride: 1 + int(stride%8)}
		var rings [][]float32
		var ring []float32
		step := 2
		if raw {
			step = 4
		}
		for i := 0; i+step <= len(data); i += step {
			var v float32
			if raw {
				v = math.Float32frombits(binary.LittleEndian.Uint32(data[i:]))
			} else {
				u := binary.LittleEndian.Uint16(data[i:])
				if u == 0xffff { // ring separator
					rings = append(rings, ring)
					ring = nil
					continue
				}
				v = float32(int16(u)) / 8
			}
			ring = append(ring, v)
		}
		rings = append(rings, ring)
		if err := checkAgainstBrute(&z, g, rings); err != nil {
			t.Fatalf("grid %+v rings %v: %v", g, rings, err)
		}
	})
}
