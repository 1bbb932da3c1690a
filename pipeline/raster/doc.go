// Package raster turns instance polygons (and crowd RLE masks) into {0,1}
// masks on the prototype grid, exactly and at a cost that tracks the
// instance rather than the grid.
//
// # Semantics
//
// The canvas is in pixel coordinates: pixel k covers [k, k+1). The grid
// has stride s (segpipe uses 4): Rows = H/s and Cols = W/s, rounded down.
// Cell (r, c) is ON iff its centre (px, py) = ((c+0.5)·s, (r+0.5)·s) is
// inside the instance.
//
// Inside one ring is the classic even-odd crossing test, evaluated in
// float64 on the float32 vertices exactly as written: over the ring's edges
// (x0,y0)→(x1,y1), each vertex to the next in ring order and the last
// back to the first (the direction matters only to rounding), count those
// with
//
//	(y0 > py) != (y1 > py)  &&  px < x0 + (py − y0)·(x1 − x0)/(y1 − y0)
//
// and the point is inside iff the count is odd. A centre exactly on a
// vertex's row or on a horizontal edge needs no special case: the strict
// y comparison counts each vertex on one side only, and a horizontal edge
// never crosses. A centre exactly on an edge is classified like a point
// just right of it (px < x is strict): inside on a shape's left border,
// outside on its right border. An instance is the union of its rings,
// as COCO merges polygon parts: one part never cuts a hole in another.
//
// Results are bit-identical to testing every cell against every edge with
// the formula above; the tests hold such a brute-force reference and a
// fuzz target compares the two. Any float input is accepted: NaN and
// infinite coordinates never panic or loop (a crossing that evaluates to
// NaN is never counted, as the formula says).
//
// # Method
//
// A ring is evaluated only on the rows whose centre lies in [ymin, ymax)
// of its vertices; outside them no edge satisfies the first condition. For
// each such row the crossings are computed with the formula, sorted, and
// the cells between consecutive crossings are filled as runs: O(rows·edges
// + crossings·log + cells) per ring, with no per-cell test.
//
// # Outputs
//
// Dense writes one mask of Rows·Cols bytes into a caller slice (typically a
// sub-slice of one batch-wide (sum_N, Rows, Cols) buffer). AppendWindow
// appends the tight Window of the ON cells and its W·H bytes instead, the
// compact form for transport; Expand turns windows back into the dense
// stack. Nothing limits the number of instances.
//
// # Crowd RLE
//
// DenseRLE and AppendWindowRLE take a COCO uncompressed RLE at image
// resolution and a geom.Affine mapping image pixels to canvas pixels. A
// cell is ON iff the image pixel containing the cell centre mapped back
// into the image (float64 inverse affine, pixel (⌊x⌋, ⌊y⌋)) is ON. It is
// nearest-neighbour sampling at the cell centre: the same point the polygon
// rule tests, so a crowd region and a polygon tracing the same outline
// agree. Only cells within one cell of the mapped box of the ON pixels are
// sampled; the columns of the RLE holding ON pixels are decoded once into a
// scratch bitmap (at most H·W bytes, kept by the Rasterizer).
//
// # Buffers and concurrency
//
// A Rasterizer owns scratch buffers and reuses them; the zero value is
// ready. After warm-up, Dense, AppendWindow (given spare capacity),
// DenseRLE and Expand allocate nothing. Use one Rasterizer per goroutine.
package raster
