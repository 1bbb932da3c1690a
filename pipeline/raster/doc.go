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
// # The Ultralytics rule
//
// Rasterizer.Rule = Ultralytics replaces the rule above, for polygons
// only, by the result of Ultralytics' polygon2mask on the canvas of
// Cols·Stride × Rows·Stride pixels, cell for cell:
//
//  1. each vertex coordinate is truncated toward zero to an integer (its
//     np.int32 cast); a ring with a NaN coordinate is dropped, and
//     coordinates beyond ±2^24 are clamped there (Ultralytics clips
//     segments to the image first, so they never occur there);
//  2. each ring is drawn as OpenCV's fillPoly draws it (lineType 8): every
//     edge's 8-connected Bresenham line, clipped to the canvas by
//     clipLine, plus, on each pixel row y, the pixels [⌈xl⌉, ⌊xr⌋] between
//     consecutive sorted crossings of the edges with y0 ≤ y < y1, each at
//     x = x0 + (y − y0)·dx in 16.16 fixed point (dx truncated; edges
//     leaving the canvas rebuilt from their clipped end points, as
//     CollectPolyEdges does). The rings of an instance are a union, one
//     fillPoly per ring, not fillPoly's even-odd rule across them;
//  3. the canvas is resized to the grid with INTER_LINEAR, which for an
//     integer stride reads a fixed set of pixels per cell: at even Stride
//     the 2×2 pixels around the cell centre (Stride·c + Stride/2 − 1 and
//     + Stride/2 on each axis), the cell ON iff at least two are ON (equal
//     weights of 1024/2048, rounded half up: at Stride 2 OpenCV's
//     INTER_AREA gives the same); at odd Stride the one pixel at the
//     centre.
//
// Everything is integer arithmetic, so amd64 and arm64 agree. The result
// is the exact rule's mask grown by about one canvas pixel on every side.
// python/tests/test_mask_rule.py compares it with opencv-python's
// fillPoly and resize (polygon2mask itself for one-ring instances) on
// every coco-tiny instance and on fuzzed polygons.
//
// No canvas is drawn: only the pixel rows the resize reads are computed,
// as runs (lines walked once, fills per sampled row, rows bucketed by a
// counting sort), and turned into cell runs, so the Outputs below and
// their allocation rules are the same as the exact rule's. The cost is
// O(perimeter + sampled rows·edges + runs) per ring.
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
