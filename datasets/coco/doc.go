// Package coco reads COCO instance-segmentation datasets (an instances_*.json
// annotation file and an image directory) as shard.Image rows.
//
// # Parsing
//
// The annotation file is parsed by a small streaming JSON scanner, never
// unmarshalled whole: COCO train2017 is 448 MB with 860k annotations not
// sorted by image, so every annotation is decoded straight into compact
// arenas (float32 coordinates back to back, RLE counts back to back, one
// 64-byte record per annotation) and grouped by image afterwards. Keys may
// come in any order, at the top level ("annotations" before "images" is
// fine) and inside objects; unknown keys are skipped.
//
// Numbers are parsed as float64 exactly as strconv.ParseFloat does and then
// converted to float32, the precision of the shard: a stored coordinate is
// float32(float64(text)). The tokens NaN, Infinity and -Infinity, which
// Python's json module writes, are accepted as numbers so the file still
// parses; the annotation holding one is then skipped (non_finite_number).
//
// # Output
//
// Images come in ascending image id order, their instances in ascending
// annotation id order; Categories are sorted by original id and given the
// contiguous Index 0..K-1. Images without annotations are kept with zero
// instances. Crowd regions keep their RLE: list counts are taken as given,
// the compressed string form is decoded to the same uncompressed counts
// (formats/rle.AppendDecode); counts must sum to h·w. Width, Height and
// Format come from the image file's header (JPEG or PNG), which must agree
// with the JSON; Bytes are the file, untouched.
//
// # Decisions on questionable data
//
//   - Points outside the image are kept exactly as given: clipping is
//     geometry and belongs to the pipeline, which must clip after
//     augmentation anyway, and a reader that clipped would change the
//     polygon's area and the stored values round-trip tests rely on.
//   - A ring of exactly 4 numbers is 2 points with no area. pycocotools
//     reads such a segmentation as a box only when it is the first ring
//     (and in current versions raises a TypeError for a list); later ones it
//     rasterises as empty. segpipe never guesses a box: the ring is dropped
//     and counted as polygon_four_numbers. Rings of 1 point or none are
//     dropped likewise (polygon_too_few_points). An instance left without
//     any ring is skipped (no_valid_polygon).
//   - A ring with an odd number of values is corrupt (pycocotools silently
//     drops the last number): the whole annotation is skipped
//     (polygon_odd_length), as it is for NaN/Inf values, a malformed bbox
//     or RLE, and fields of the wrong type.
//   - Of two images, annotations or categories with the same id, the first
//     in file order is kept. Annotations of an image entry that was skipped
//     for its own defects are then counted as unknown_image_id; those of an
//     image skipped for its file (missing, corrupt header, size mismatch)
//     go with it, and the image's Problem says how many.
//   - An image the loader could not decode is skipped when the set is
//     opened, never emitted: one whose header says more than
//     Options.MaxPixels pixels (image_too_large; imagehdr.MaxPixels by
//     default, so a 74-byte PNG claiming 65,535² never reaches a decoder),
//     and one whose data is cut short or structurally broken (corrupt_image:
//     no EOI after a JPEG's scan, a PNG chunk out of the file, a bad chunk
//     CRC or no IEND).
//   - An image with more than shard.MaxInstances annotations is skipped
//     whole (too_many_instances), never truncated: a partial label set
//     would teach the model that the rest is background.
//
// See package datasets for the skip-and-count policy and Strict mode.
//
// # Cost
//
// Open reads every image header (a few KB per file, in parallel), and the
// end of each JPEG (8 KiB) or every chunk of each PNG, so Len is exact
// before any row is emitted and start in Images refers to stable row
// numbers; Images reads each file once more, whole. The structural check
// costs about 3-7 µs of CPU a coco-tiny image, against 7-16 ms for the
// full decode it stands in for.
package coco
