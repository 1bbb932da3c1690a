// Package batch defines segpipe's training-batch contract: one Arrow record
// per training batch, one row per image, built over caller-owned buffers
// without copying.
//
// # Schema (in column order)
//
//	image            arrow.fixed_shape_tensor<uint8>{shape:[3,H,W], dim_names:[C,H,W]}  RGB, CHW
//	image_id         int64                        the dataset's image id of the sample
//	orig_height      int32                        source image size in pixels
//	orig_width       int32
//	transform        fixed_size_list<float64>[6]  [a b c d e f]: source (x,y) → canvas
//	                                              (a·x+b·y+c, d·x+e·y+f); for a mosaic
//	                                              it is the transform of the sample's own
//	                                              image (the first of its four tiles)
//	boxes            list<fixed_size_list<float32>[4]>  x1 y1 x2 y2, canvas pixels
//	classes          list<int32>                  contiguous class index per box
//	iscrowd          list<uint8>                  1: a COCO crowd region (only when the
//	                                              loader keeps crowd instances), to be
//	                                              ignored, not found; else 0
//	boxes_per_image  int32                        N_i
//	masks            list<arrow.fixed_shape_tensor<uint8>{shape:[Hp,Wp]}>  values {0,1}
//
// The lists boxes, classes, iscrowd and masks share one offsets buffer: the prefix
// sums of boxes_per_image. Instance j of image i is row offsets[i]+j of each
// list's child. The masks child values are ONE contiguous buffer of
// sum_N·Hp·Wp bytes, so a consumer sees the whole stack as a (sum_N, Hp, Wp)
// array and splits it by boxes_per_image (see [MaskStack]). Hp = H/stride,
// Wp = W/stride; the stride is stored under the schema metadata key
// [MetaMaskStride]; the schema version ([Version]) under [MetaVersion].
//
// # Live canvas
//
// A stream whose batches use part of the canvas (rectangular validation
// batches, multi-scale training batches) keeps one schema, the largest
// canvas, and adds a last column, canvas fixed_size_list<int32>[2]: the
// live (height, width) every row of the batch shares ([NewCanvasBuilder],
// [LiveCanvas]). The images lie at the canvas' top left, the rest is the
// fill value and zero mask cells, so a consumer views image[..., :h, :w]
// and masks[:, :h/stride, :w/stride] without copying. Streams without it
// have exactly the schema above.
//
// fixed_shape_tensor is Arrow's canonical extension type (arrow-go v18 has
// none): storage fixed_size_list<value>[prod(shape)], extension metadata
// {"shape":[...]} (plus optional "dim_names", "permutation"). The package
// registers it on import so that IPC and Flight round trips restore it.
//
// # Windowed form
//
// For transport (`segpipe serve` with "masks":"windowed") a batch may
// carry its masks as per-instance windows instead of the dense stack: the
// masks column is replaced by mask_windows (per instance x0, y0, w, h on
// the grid) and mask_data (per image the windows' w·h bytes), with the
// grid under [MetaMaskGrid] (see [WindowedSchema]). [Windowed] makes that
// form of a dense record, [Builder.BuildWindowed] builds one over given
// buffers, [MaskWindowsOf] reads its mask part (checking the layout; the
// windows against the grid are an expansion's checks, pipeline/raster's
// Expand or CheckWindows), and [InstancesWithoutMasks] its other instance
// columns. [IsWindowed] tells the forms apart.
//
// # Ownership
//
// [Builder.Build] wraps the given memory.Buffers; the record holds its own
// references. A consumer that receives a record owns one reference and must
// Release it exactly once (Retain first to keep it longer or share it).
// Releasing the last reference releases the buffers, which returns pooled
// memory to the allocator it came from. Views returned by [ImageTensor] and
// [MaskStack] alias the record's memory and are valid until it is released.
package batch
