package raster_test

import (
	"fmt"

	"github.com/segpipe/segpipe/pipeline/raster"
)

// A triangle on a 48×32 canvas at stride 4: each printed cell is ON when
// its centre ((c+0.5)·4, (r+0.5)·4) lies inside the polygon.
func ExampleRasterizer_Dense() {
	g, err := raster.NewGrid(48, 32, 4) // 12 columns, 8 rows
	if err != nil {
		panic(err)
	}
	triangle := []float32{4, 2, 44, 6, 14, 30} // x,y pairs in canvas pixels
	mask := make([]uint8, g.Cells())
	var z raster.Rasterizer
	if err := z.Dense(mask, g, [][]float32{triangle}); err != nil {
		panic(err)
	}
	for r := 0; r < g.Rows; r++ {
		for _, v := range mask[r*g.Cols : (r+1)*g.Cols] {
			fmt.Print([]string{".", "#"}[v])
		}
		fmt.Println()
	}

	wins, data, _ := z.AppendWindow(nil, nil, g, [][]float32{triangle})
	fmt.Printf("window %+v, %d bytes instead of %d\n", wins[0], len(data), g.Cells())
	// Output:
	// ............
	// .##########.
	// ..########..
	// ..######....
	// ..#####.....
	// ...###......
	// ...##.......
	// ............
	// window {X0:1 Y0:1 W:10 H:6}, 60 bytes instead of 96
}
