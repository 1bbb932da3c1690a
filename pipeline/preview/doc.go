// Package preview draws training batches as contact sheets, to check
// augmentations and mask alignment by eye.
//
// [Sheet] draws every image of a batch as a tile: the canvas pixels, each
// instance's mask as a translucent overlay with a crisp outline, its box
// and its class name. Masks are upsampled from the prototype grid by
// nearest cell (a canvas pixel takes the value of the grid cell it lies
// in), so what the sheet shows is exactly what the loss sees, not a
// smoothed version. Instances are drawn largest first, so small ones stay
// visible on top. Colours cycle through a fixed 20-colour palette by
// instance index within the image.
//
// [GridSheet] draws the raw mask grid of each image at one block per cell:
// each instance's cells in its colour, cells claimed by two or more
// instances in white, and the boxes divided by the stride. Misaligned
// boxes and masks, lost instances and empty masks show here first.
//
// Text uses the Go Medium font (golang.org/x/image/font/gofont): pure Go,
// embedded, anti-aliased, so the command needs no font files. The
// renderers allocate per call; they are for looking, not for the hot path.
package preview
