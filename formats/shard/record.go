// Package shard defines segpipe's on-disk dataset format: Parquet shards of
// one row per image plus a manifest.json that is the single entry point for
// readers. See README.md in this directory for the schema.
package shard

// Image is one row of a shard: an image's encoded bytes and all of its
// instances. It is the unit that dataset readers (datasets/coco,
// datasets/yolo, datasets/synth) produce and that the shard writer stores.
type Image struct {
	ImageID  int64  // original dataset image id
	FileName string // path relative to the dataset's image directory
	Width    int32  // pixels of Bytes (the image header, or the stored pixels)
	Height   int32
	Format   string // FormatJPEG, FormatPNG, FormatRaw or FormatZstd: the encoding of Bytes
	Bytes    []byte // the original encoded file, untouched, or pre-decoded pixels

	// SourceWidth and SourceHeight are the size of the source image when
	// the stored pixels were resized from it (pre-decoded rows with a
	// max side), else equal to Width and Height. Instances are always in
	// the stored frame (Width×Height); predictions map back to the source
	// image by the scale SourceWidth/Width, SourceHeight/Height. Zero only
	// in rows built by hand: then they mean Width and Height.
	SourceWidth  int32
	SourceHeight int32

	Instances []Instance
}

// MaxInstances bounds the instances of one image, in a conversion and in
// the loader alike: an image with more is skipped and counted under
// ReasonTooManyInstances, never truncated (a partial label set would teach
// the model that the rest is background). COCO's densest image has 93
// instances; the bound leaves room for far denser sets while one image's
// masks at 640 px and stride 4 stay under 52 MB (2,048 planes of 160²).
const MaxInstances = 2048

// ReasonTooManyInstances is the skip reason of an image over MaxInstances.
const ReasonTooManyInstances = "too_many_instances"

// Instance is one annotated object of an image.
type Instance struct {
	AnnID      int64      // original annotation id
	CategoryID int32      // original dataset category id (COCO: 1..90, sparse)
	Class      int32      // contiguous class index 0..K-1 (see Manifest.Categories)
	BBox       [4]float32 // COCO x, y, w, h in image pixels
	Area       float32    // the dataset's area field, as given (scaled with the image when resized)
	IsCrowd    bool

	// Polygons holds every part of the instance, each a ring of flat
	// x0,y0,x1,y1,… float32 pixel coordinates. Empty for RLE instances.
	Polygons [][]float32

	// RLE is set for instances given as run-length masks (COCO crowd
	// regions). Counts are canonical uncompressed COCO counts: column-major,
	// alternating runs starting with zeros.
	RLE *RLE
}

// RLE is a COCO run-length encoded mask at image resolution.
type RLE struct {
	Height, Width int32 // COCO "size" is [h, w]
	Counts        []uint32
}

// SourceSize returns SourceWidth and SourceHeight, or Width and Height for
// a row that leaves them zero.
func (img *Image) SourceSize() (w, h int32) {
	if img.SourceWidth > 0 && img.SourceHeight > 0 {
		return img.SourceWidth, img.SourceHeight
	}
	return img.Width, img.Height
}

// Category is one entry of the dataset's category table.
type Category struct {
	ID            int32  `json:"id"`    // original dataset category id
	Index         int32  `json:"index"` // contiguous class index 0..K-1
	Name          string `json:"name"`
	Supercategory string `json:"supercategory,omitempty"`
}
