// Package yolo reads Ultralytics YOLO segmentation datasets (data.yaml,
// images/…, labels/…/*.txt) as shard.Image rows, with the bad-input policy
// of package datasets.
//
// # Layout
//
// data.yaml gives names (a list, ids 0..n-1, or a map id → name), an
// optional nc that must agree, an optional path (the dataset root,
// relative to the YAML file's directory; default that directory), and one
// key per split whose value is an image directory (searched recursively),
// a .txt file listing image paths, or a list of those, relative to the
// root. The YAML is read by a small parser for the subset these files use
// (scalars, flow and block lists and maps one level deep, comments);
// anything fancier is an error naming the line, never a guess.
//
// An image's label file is found the Ultralytics way: the last "images"
// directory of its path becomes "labels" and the extension ".txt". An
// image without a label file, or with an empty one, is a background image:
// kept, with zero instances (counted in Stats, not as a problem).
//
// # Rows
//
// Images are ordered by path relative to the root; an image's id is its
// 1-based position in that order (skipped images keep their numbers, so
// ids do not shift when a bad file is fixed). FileName is that relative
// path. Annotation ids are 1, 2, … over the kept instances in row order,
// lines in file order. Width, Height and Format come from the image
// header; only JPEG and PNG are stored (other image extensions are
// skipped as unsupported_image_format).
//
// # Label lines
//
//   - "cls x1 y1 x2 y2 x3 y3 …" is a polygon of at least 3 points,
//     normalised by the image size. Pixel coordinates are
//     float32(v·width) and float32(v·height), computed in float64. BBox is
//     the polygon's bounding box and Area its shoelace area (YOLO has no
//     area field).
//   - "cls cx cy w h" is a box. It becomes an instance whose bbox is the
//     box and whose single polygon is the box's 4 corners (clockwise from
//     the top-left), Area w·h: every instance then has a mask, which is
//     also how pycocotools rasterises a box.
//   - Points outside [0, 1] are kept as given (as in package coco);
//     clipping belongs to the pipeline.
//   - Skipped, by line: an odd number of coordinates (polygon_odd_length),
//     one point (polygon_too_few_points), a class that is not a
//     non-negative integer or a value that is not a number
//     (invalid_label_line), NaN/Inf (non_finite_number), a class missing
//     from names (unknown_category_id), a box of negative size
//     (invalid_bbox). The image keeps its other lines.
//   - Skipped, by image: more than shard.MaxInstances instances
//     (too_many_instances; parsing stops at the first one over, and what
//     was stored of the image is rolled back), a label file over
//     MaxLabelBytes (label_file_too_large, not read), and, as in package
//     coco, an image over Options.MaxPixels (image_too_large) or cut short
//     (corrupt_image).
package yolo
