// Package geom is segpipe's one definition of an instance polygon and the
// geometry the augmenter, the rasteriser and the evaluator share.
//
// # Representation
//
// A ring is a flat []float32 of x,y pairs in canvas pixel coordinates
// (pixel k covers [k, k+1); x grows right, y grows down): x0,y0,x1,y1,...
// The ring is closed implicitly: the last vertex joins the first. A
// trailing odd number is ignored, as COCO does. An instance is a
// [][]float32 of rings (COCO multi-part instances); it covers the union of
// its rings. Ring and Instance are aliases, so plain slices work
// everywhere without conversion.
//
// Coordinates are stored as float32: half the bytes of COCO's float64,
// and still finer than 1/10000 px anywhere on a 2048 px canvas. Every
// computation here is done in float64, so a transform or clip loses no more
// than the final rounding to float32.
//
// # Buffers
//
// Functions that produce points append to a caller-provided dst and return
// it, in the style of strconv.AppendInt. Reusing dst[:0] across calls makes
// the steady state allocation-free. Nothing in this package retains a
// slice it was given.
//
// # Degenerate input
//
// NaN and infinite coordinates never panic or loop; they produce whatever
// float64 arithmetic makes of them. Bounds ignores NaN. ClipRect drops a
// result with fewer than three distinct vertices.
//
// # Same bytes on every architecture
//
// The Go compiler may fuse x*y + z into one FMA instruction on arm64 (not
// on amd64), which rounds once instead of twice and so changes results.
// Everywhere a product meets an addition in code that decides batch
// contents (this package, augment, raster, order), the product is rounded
// explicitly, float64(x*y) + z or float32(x*y) + z, which the spec says
// prevents fusion and which costs nothing on amd64, where the bytes stay
// as they were. This includes products that reach an addition through a
// variable or an inlined call (order.Uniform's arguments), and divisions
// by a power of two, which the compiler turns into multiplications. Check:
// GOARCH=arm64 go build -gcflags=-S ./pipeline/... prints no FMADD, FMSUB,
// FNMADD or FNMSUB in these packages; the test of record is that
// segpipe dump gives the same bytes on amd64 and arm64.
package geom
