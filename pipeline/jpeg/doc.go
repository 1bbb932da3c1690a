// Package jpeg decodes the common kind of JPEG — baseline sequential
// Huffman, 8-bit, grey or YCbCr with luma sampled 1×1, 2×1, 1×2 or 2×2
// against chroma, one interleaved scan, restart intervals allowed —
// straight into interleaved RGB, in a buffer the caller reuses.
//
// Its output is byte for byte that of the standard library's image/jpeg
// followed by the JFIF colour conversion of color.YCbCrToRGB (chroma
// replicated, not interpolated): the inverse DCT is the same integer
// algorithm, and the tests compare the two on real and synthetic images.
// What it does not handle (progressive, arithmetic coding, 12-bit,
// CMYK/Adobe, RGB-coded, several scans, other sampling factors) it
// reports as ErrUnsupported, and so it does for a stream it finds damaged,
// so that the caller can hand exactly those to image/jpeg, which then
// decides.
//
// The speed comes from a 64-bit bit buffer with a 9-bit lookup for
// Huffman codes, dequantisation folded into coefficient decoding, colour
// conversion per MCU row while the planes are in cache, and on amd64 with
// AVX2 an inverse DCT of eight rows at a time that gives the Go version's
// bytes.
package jpeg
