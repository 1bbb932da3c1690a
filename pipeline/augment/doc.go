// Package augment implements segpipe's training augmentations with the
// widely used YOLO (Ultralytics) defaults as reference semantics, rendered in
// one resampling pass.
//
// # Pipeline
//
// Train (probability Mosaic): four images — the sample and three partners —
// are placed on a 2s×2s source canvas around a centre (xc, yc) drawn uniform
// in [s/2, 3s/2) and truncated to a pixel: each image resized so its long
// side is s (YOLO's load_image size, ceil and capped), tile 0 to the top
// left of the centre, 1 top right, 2 bottom left, 3 bottom right, cut by the
// canvas. Then the random perspective M = T·S·R·P·C maps the canvas to the
// s×s output (C centres the canvas, P perspective ±Perspective, R rotation
// ±Degrees with scale U[1−Scale, 1+Scale], or U[ScaleMin, ScaleMax] when
// ScaleMax is set (Ultralytics' scale=(min, max)), S shear ±Shear degrees, T
// translation U[0.5±Translate]·s), then a vertical flip with probability
// FlipUD and a horizontal one with probability FlipLR, each composed into M
// (y → s−y, x → s−x: image, boxes and masks flip together), HSV jitter, and
// with probability BGR the channels written in BGR order, as Ultralytics'
// Format returns a training image with probability bgr.
//
// Without mosaic (TrainNoMosaic, and a Train draw above Mosaic) the image is
// letterboxed onto an s×s source canvas (resized to long side s, centred,
// padding split as YOLO's LetterBox does) and the same M, flips, HSV and
// BGR follow. Val letterboxes only: no randomness, M = identity.
//
// Mix (Train only; Ultralytics turns both off with mosaic): with
// probability Mixup a second sample, with its own mosaic draw, tiles and
// random perspective (NewMixPlan), is blended in, ⌊a·r + b·(1−r)⌋ per byte
// with r ~ Beta(32, 32) (the median of 63 uniforms, rounded to 1/65536);
// then with probability Cutmix a third one's region is pasted
// (NewCutPlan: Ultralytics' three candidate regions, one clear of every
// box chosen, the partner's instances with ≥ 1 % of their box inside cut
// to it). Labels are the sample's, then each partner's; the flips, BGR
// and HSV apply to the result, as Ultralytics applies them after mixing
// (RenderMix).
//
// All maps are composed: each output pixel centre is mapped once by M⁻¹ to
// the source canvas, assigned to the tile whose visible rectangle holds it
// (else the Fill colour, 114), mapped into that tile's original image and
// sampled bilinearly with replicated edges. Neither the resized images nor
// the 2s×2s canvas exist. Differences from the reference, which resamples
// twice (resize, then warp) and blends 114 across tile edges: one rounding
// instead of two, and tile borders are sharp.
//
// HSV: gains g = 1 + U(−1,1)·(HSVH, HSVS, HSVV) per sample; lookup tables
// hue' = (hue·gh) mod 180, sat' = clip(sat·gs), val' = clip(val·gv) applied
// in OpenCV's 8-bit HSV (hue in [0,180)); the conversions follow OpenCV's
// 8-bit algorithms (the backward one with per-image 0.12 fixed-point
// coefficients: within one level of OpenCV's float conversion). The
// padding colour is jittered like any pixel.
//
// # Labels
//
// Polygon rings are mapped vertex by vertex in float64 by the same maps
// (exact: affine and projective maps keep edges straight), clipped to the
// tile's visible rectangle on the source canvas, mapped by M and clipped to
// the output canvas [0,s]² (geom.ClipRect). The candidate rule (YOLO's
// box_candidates with its segment thresholds) compares the instance's box
// before the output clip (bounds of its mapped rings) with the box after
// (bounds of its clipped rings) and keeps it iff
//
//	w_after > 2 and h_after > 2 (MinSide)
//	w_after·h_after > 0.01·w_before·h_before (MinArea)
//	max(w_after/h_after, h_after/w_after) < 100 (MaxAspect)
//
// The kept box is the after box. Crowd instances (iscrowd) are dropped, as
// YOLO training does, unless KeepCrowd is set; then an RLE region is carried
// with its image→canvas affine for the rasteriser (not under a perspective
// term) and a polygon region is transformed like any instance; both are
// listed in Labels.Crowd so that the batch can flag them. An ordinary
// (iscrowd 0) instance whose mask is an RLE, as SA-1B stores every mask, is
// kept like a polygon one and carried the same way as an RLE crowd region,
// in Labels.Crowd with NotCrowd set (not flagged); its box is its COCO bbox
// mapped and clipped. Under a perspective term it is dropped (counted in
// Labels.Dropped).
//
// # Randomness
//
// Every draw comes from the caller's generator (segpipe seeds one per
// sample from (seed, epoch, position)) in a fixed order: WantMosaic, the
// centre, P, rotation, scale, shear, translation, HSV, vertical flip,
// horizontal flip, BGR; then WantMixup, the mixup partner's mosaic draw,
// centre, perspective and ratio; then WantCutmix, the cutmix partner's
// mosaic draw, centre, perspective, its three regions and the choice. The
// partners are positions of the epoch (order.Epoch.Partners: 3 the mixup
// partner, 7 the cutmix one, each followed by its mosaic's three). A draw
// whose setting is 0 (FlipUD, BGR, Mixup, Cutmix, all three HSV gains) is
// not taken, so that a setting added at 0 leaves every
// other draw, and the batches, as they were. Results are therefore
// independent of scheduling.
package augment
