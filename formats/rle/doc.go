// Package rle implements COCO run-length encoded masks exactly as
// pycocotools' maskApi.c does, so that masks, areas and IoUs computed here
// are bit-for-bit those of the reference evaluator.
//
// Semantics a user must know:
//
//   - An RLE covers an H×W image in column-major order: pixel (x, y) has
//     index x·H + y. Counts alternate runs of 0s and 1s, starting with 0s,
//     so the first count may be 0.
//   - The compressed string form (Encode/Decode) stores count i as the
//     difference to count i-2 when i > 2 (not ≥ 2), in 5-bit groups, least
//     significant first, each group written as a byte 48+(bits|continue<<5).
//   - FromPolygon is a port of rleFrPoly: vertices are scaled by 5 and
//     truncated with (int)(5·v + .5), the boundary is walked densely and
//     only crossings at pixel-column centres are kept. The result is not a
//     "pixel centre inside polygon" rasterisation; it is the one COCO's
//     ground truth and every published COCO mask metric use.
//   - FromPolygons rasterises each part and merges them by union (what
//     COCO.annToRLE does); a single part is returned unchanged.
//   - IoU runs on the runs, never on dense masks; a crowd ground truth
//     divides the intersection by the detection's area only.
//   - Counts are kept as given (non-canonical runs such as interior zeros
//     are preserved) because pycocotools keeps them too.
//
// Nothing in this package panics on malformed input: parsers return errors
// and geometric helpers reject non-finite or absurd coordinates.
package rle
