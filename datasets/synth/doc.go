// Package synth generates seeded, deterministic COCO-format instance
// segmentation datasets: JPEG images with filled shapes drawn from exactly
// the polygons written to the annotation file, multi-part instances, and a
// few crowd regions stored as RLE (half as count lists, half as compressed
// strings, as COCO mixes them).
//
// The statistics follow COCO 2017 train closely enough for benchmarks and
// tests: about 7.3 instances an image (1 % of images empty, a long tail up
// to 60), ring lengths log-normal with median 15 and 95th percentile 50
// points, about 12 % multi-part instances, 1 % crowd, and the COCO size
// spread (41 % small < 32², 34 % medium, 25 % large, by area). 80 categories
// carry COCO's names and its sparse ids 1..90. Image ids are a seeded
// permutation of 1..N and annotations are written interleaved across
// images, so readers cannot rely on either being sorted.
//
// Same Config and seed, byte-identical output: every image draws from its
// own generator seeded by (Seed, image index), so images can be encoded in
// parallel without changing a byte.
//
// Config.Easy generates a different set instead, for demonstrations that
// must show learning in minutes on a CPU (segpipe quickstart): a plain
// background, 1–3 large shapes per image that never overlap, and 1–4
// classes (disc, square, triangle, cross), each its own outline and colour.
//
// Drawing rule: a pixel (x, y) belongs to a ring when its centre
// (x+0.5, y+0.5) is inside it by the even-odd rule; crowd RLEs use the same
// rule, so a crowd mask is exactly the pixels painted for it.
package synth
