// Package predict turns a trained YOLO26-seg model's one-to-one outputs
// into instance masks, drawings and COCO results, the post-processing of
// the reference's segmentation validator (spec §9).
//
// Semantics a user must know:
//
//   - Detections come from model.Decode: top-k without NMS on the
//     one-to-one branch, sorted by score, then kept when score > Conf.
//   - A mask is sigmoid(coefficients · prototypes) on the prototype grid
//     (canvas stride 4), cropped to the detection box scaled to the grid.
//     Like the reference on CPU, the box is rounded to whole cells (half to
//     even) when an image has fewer than 50 detections, and otherwise a
//     cell c is kept when x1 ≤ c < x2. Foreground is probability > 0.5
//     (logit > 0). GridMasks gives these grid masks (validation);
//     Predictor maps them to the original image (results JSON, drawings).
//   - Original-image masks: each original pixel centre is mapped through
//     the letterbox to the prototype grid, the logit is sampled bilinearly
//     (the reference's native masks upsample the logits bilinearly too) and
//     kept where it is > 0 inside the box. Boxes are mapped back through the
//     inverse letterbox and clipped to the image.
//   - Results JSON: one COCO result per detection with bbox [x, y, w, h],
//     score, category_id (the dataset's id from the checkpoint's category
//     table) and segmentation as a compressed RLE, readable by
//     `segpipe eval` and pycocotools.
package predict
