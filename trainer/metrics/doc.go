// Package metrics computes COCO box and mask mAP with the exact semantics
// of pycocotools' COCOeval (default parameters), for COCO files and for
// the trainer's validation pass on the prototype grid.
//
// Two front ends share one core (matching in evaluateImg, accumulate,
// summarize):
//
//   - Evaluate scores a COCO results list read by ReadResults against a
//     Dataset read by ReadDataset. It reproduces pycocotools' summary and
//     per-category numbers (checked to 1e-6 against fixtures; in practice
//     to the last few bits).
//   - EpochMetric accumulates box and mask mAP from loader-format ground
//     truth ({0,1} masks on the stride-4 grid, canvas boxes, per-image
//     affine) and predictions, one image at a time.
//
// Semantics a user must know:
//
//   - Thresholds are numpy.linspace values (IoU 0.5…0.95 with
//     0.8999999999999999; recall i·0.01), area ranges are inclusive at both
//     ends ([0, 32²], [32², 96²], [96², 1e10]) and in original-image pixels.
//   - Detections of one (image, category) are stably sorted by descending
//     score (ties keep results-file order) and cut to 100 before matching;
//     across images, ties keep ascending image id order. Reordering a
//     results file can therefore change the numbers, as it does in
//     pycocotools.
//   - Ground-truth area is the annotation's "area" field, not the mask
//     pixel count. A detection's area is its box area when the results
//     file's first entry has a bbox (even for segm), otherwise its mask
//     pixel count (COCO.loadRes).
//   - Crowd ground truth is ignored, matches any number of detections,
//     and its IoU is intersection / detection area.
//   - A detection matched to an annotation whose id is 0 counts as
//     unmatched, because COCOeval tests the stored id for non-zero.
//   - ReadResults is stricter than pycocotools where pycocotools would
//     crash or silently drop data: unknown category ids, missing scores,
//     masks of the wrong size and malformed RLE are errors that name the
//     detection's index.
//
// EpochMetric documents how grid areas are mapped to original pixels.
package metrics
