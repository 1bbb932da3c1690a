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
// Copy-paste (Train only, Ultralytics' CopyPaste; CopyPaste is both the
// share pasted and, in mixup mode, the probability): candidates are
// ordinary polygon instances (not crowd regions, not RLE masks). Flip
// mode (the default) works on the source canvas before the random
// perspective, where Ultralytics pastes between mosaic and affine: each
// instance's box there (mapped, clipped to its tile's visible rectangle)
// is an existing box, and its mirror x → a−x (a the canvas side of a
// mosaic, else the letterboxed image's left plus right edge) a candidate.
// Mixup mode works on the output canvas, as Ultralytics pastes after the
// affine: the candidates are a second sample's kept instances, that
// sample drawn as a mixup partner is (own mosaic and perspective, the
// sample's flips). Either way a candidate is eligible iff its box's IoA
// (intersection over the existing box's area, + 1e-7) with every
// existing box is < 0.30; the eligible are ordered by their largest IoA
// (stable: ties keep instance order) and the first round(CopyPaste·n),
// rounded half to even as Python's round, are pasted, in that order and
// appended after the sample's instances. A flip-mode paste then goes
// through M and the candidate rule like any instance (Ultralytics' affine
// follows the paste); a mixup-mode one keeps the partner's labels. Pixels:
// each output pixel whose centre lies inside a pasted instance (every
// selected one, kept or not, as Ultralytics draws every selected contour)
// takes the source's pixel: the sample rendered with M·F (F the mirror)
// or the partner rendered with its own plan (RenderMix), before mixup
// and cutmix blend in. The mixup and cutmix partners get pastes of their
// own (PartnerPaste, Part.Paste), as Ultralytics draws MixUp's and
// CutMix's partners through the sample's pre-transform, CopyPaste
// included: in flip mode among the partner's own instances, in mixup mode
// from a further sample (the partner's own WantCopyPaste draw and source,
// PartnerPaste.Src); on the partner's image before the blend or the cut,
// and a cutmix region is measured against the pasted labels.
//
// Occlusion. Ultralytics leaves the masks below a paste whole; segpipe
// cuts the paste out of them, so that a mask cell is never claimed by two
// instances where one covers the other. The sample's instances lie below
// every pasted region, a pasted instance below those pasted after it.
// Masks are rasterised later, from polygons, so a cut instance carries
// its remaining region as polygons: the integer lattice points (x, y) of
// the output canvas inside the instance and inside no pasted region above
// it (both by the rasteriser's crossing test, evaluated at exactly (x, y)),
// as rectangles [x0, x1)×[y0, y1) of whole runs merged down the rows. A
// rectangle holds exactly its lattice points under the rasteriser's rule,
// and at an even stride every cell centre ((c+½)·stride) is a lattice
// point, so the cut mask is, cell for cell, "inside the instance and
// outside every pasted region above it". Its box becomes the bounds of
// the rectangles. An instance no lattice point of which is covered keeps
// its polygons and box untouched. A cut instance is dropped (counted in
// Labels.Dropped) when nothing is left or when it fails the candidate rule
// with its box before the cut as "before" and the rectangles' bounds as
// "after", or when its lattice points left are not more than MinArea
// times those it had: the paste cuts it as the canvas edge would. Crowd
// regions and RLE masks are never cut. Under mask_rule=ultralytics the
// rectangles are rasterised by that rule, which grows each one as it
// grows a polygon.
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
// horizontal flip, BGR; then WantCopyPaste (mixup mode only) and the
// copy-paste partner's mosaic draw, centre and perspective; then
// WantMixup, the mixup partner's mosaic draw, centre, perspective and
// ratio; then the mixup partner's own WantCopyPaste (mixup mode: and its
// source's mosaic draw, centre and perspective); then WantCutmix, the
// cutmix partner's mosaic draw, centre, perspective, its own
// WantCopyPaste (and source, likewise), its three regions and the
// choice. The partners are positions of the epoch (order.Epoch.Partners:
// 3 the mixup partner, 7 the cutmix one, 11 the copy-paste one, 15 and 19
// the mixup and cutmix partners' copy-paste sources, each followed by its
// mosaic's three). Flip-mode copy-paste draws nothing. A draw whose setting is 0
// (FlipUD, BGR, Mixup, Cutmix, CopyPaste, all three HSV gains) is not
// taken, so that a setting added at 0 leaves every other draw, and the
// batches, as they were. Results are therefore independent of scheduling.
package augment
