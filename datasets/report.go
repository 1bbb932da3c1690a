package datasets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/segpipe/segpipe/formats/imagehdr"
	"github.com/segpipe/segpipe/formats/shard"
)

// Stable reasons for skipped items. They appear in logs, in Report.Counts
// and in converted shards' manifests; never rename one.
const (
	ReasonMalformedJSON       = "malformed_json"             // document cannot be parsed (always an error)
	ReasonInvalidField        = "invalid_field"              // a field has the wrong JSON type or an impossible value
	ReasonMissingField        = "missing_field"              // a required field is absent
	ReasonDuplicateImageID    = "duplicate_image_id"         // later image entry with an id already seen; skipped
	ReasonDuplicateAnnID      = "duplicate_ann_id"           // later annotation with an id already seen; skipped
	ReasonDuplicateCategoryID = "duplicate_category_id"      // later category with an id already seen; skipped
	ReasonInvalidFileName     = "invalid_file_name"          // absolute or escaping (..) image path
	ReasonMissingImageFile    = "missing_image_file"         // image file does not exist or cannot be read
	ReasonCorruptImage        = "corrupt_image"              // header is not a decodable JPEG or PNG, or the data is truncated or its structure broken
	ReasonImageTooLarge       = imagehdr.ReasonTooLarge      // header's width·height over the pixel bound (imagehdr.MaxPixels by default)
	ReasonImageSizeMismatch   = "image_size_mismatch"        // header size disagrees with the annotation file
	ReasonUnknownImageID      = "unknown_image_id"           // annotation refers to an image that is not listed
	ReasonUnknownCategoryID   = "unknown_category_id"        // annotation or label refers to an unlisted category
	ReasonPolygonOddLength    = "polygon_odd_length"         // ring with an odd number of values; annotation skipped
	ReasonPolygonTooFewPoints = "polygon_too_few_points"     // ring with fewer than 3 points (other than 4 numbers); ring dropped
	ReasonPolygonFourNumbers  = "polygon_four_numbers"       // ring of exactly 4 numbers (pycocotools: a box); ring dropped
	ReasonNoValidPolygon      = "no_valid_polygon"           // every ring of an instance was dropped; annotation skipped
	ReasonEmptySegmentation   = "empty_segmentation"         // segmentation absent or []; annotation skipped
	ReasonNonFinite           = "non_finite_number"          // NaN or ±Inf in coordinates, bbox or area; annotation skipped
	ReasonInvalidBBox         = "invalid_bbox"               // bbox not 4 numbers or negative width/height
	ReasonInvalidRLE          = "invalid_rle"                // RLE size/counts malformed, counts not summing to h*w, or size not the image's
	ReasonInvalidLabelLine    = "invalid_label_line"         // YOLO label line that is not numbers in a known layout
	ReasonTooManyInstances    = shard.ReasonTooManyInstances // image with more than shard.MaxInstances instances; skipped whole, never truncated
)

// ErrBadInput is wrapped by every *Problem, so callers can tell a dataset
// defect (exit code 1 with a precise message) from an I/O or usage error.
var ErrBadInput = errors.New("bad input")

// ErrImagesNotFound marks a split in which most listed images are missing:
// the image directory (or the split) is wrong as a whole, not a few files.
// Callers report it as a usage error.
var ErrImagesNotFound = errors.New("images not found")

// MaxMissingFraction is the share of listed images that may be missing
// before a reader gives up with ErrImagesNotFound instead of skipping them.
const MaxMissingFraction = 0.5

// CheckMissing returns an error wrapping ErrImagesNotFound when more than
// MaxMissingFraction of the listed images are missing under dir; first
// holds the first few missing paths, for the message.
func CheckMissing(dir string, listed, missing int, first []string) error {
	if listed == 0 || float64(missing) <= MaxMissingFraction*float64(listed) {
		return nil
	}
	return fmt.Errorf("%d of the %d listed images are missing under %s (first: %s): pass the directory the image paths are relative to, for the same split as the annotations: %w",
		missing, listed, dir, strings.Join(first, ", "), ErrImagesNotFound)
}

// Problem is one defect in a dataset. In strict mode a reader returns the
// first one as its error; otherwise it is counted in a Report and skipped.
type Problem struct {
	File    string // dataset file the problem is in (annotation JSON, image, label file)
	Offset  int64  // byte offset in File of the offending JSON value, or -1
	Line    int    // 1-based line in File (YOLO labels), or 0
	Where   string // JSON location such as "annotations[12].segmentation[0]", or ""
	ImageID int64  // image id, or -1 when unknown
	AnnID   int64  // annotation id, or -1 when not about an annotation
	Reason  string // one of the Reason constants
	Detail  string // human-readable specifics
}

// Error says where, then what.
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	if p.Offset >= 0 {
		fmt.Fprintf(&b, " byte %d", p.Offset)
	}
	if p.Where != "" {
		fmt.Fprintf(&b, " %s", p.Where)
	}
	if p.ImageID >= 0 {
		fmt.Fprintf(&b, " image %d", p.ImageID)
	}
	if p.AnnID >= 0 {
		fmt.Fprintf(&b, " annotation %d", p.AnnID)
	}
	fmt.Fprintf(&b, ": %s", p.Reason)
	if p.Detail != "" {
		fmt.Fprintf(&b, ": %s", p.Detail)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrBadInput) true for every Problem.
func (p *Problem) Unwrap() error { return ErrBadInput }

// LogPerReason is how many problems of one reason a Report logs at Warn
// before it logs the rest at Debug: shard.LogPerReason, the loader's
// bound for its skips too.
const LogPerReason = shard.LogPerReason

// Report counts skipped items by reason. The zero value is ready to use and
// safe for concurrent use.
type Report struct {
	// Logger receives one record per problem; nil means slog.Default().
	Logger *slog.Logger

	mu     sync.Mutex
	counts map[string]int64
}

// Handle applies the bad-input policy to p: in strict mode it returns p as
// the error; otherwise it counts and logs p and returns nil.
func (r *Report) Handle(strict bool, p *Problem) error {
	if strict {
		return p
	}
	r.Add(p)
	return nil
}

// Add counts and logs p.
func (r *Report) Add(p *Problem) {
	r.mu.Lock()
	if r.counts == nil {
		r.counts = make(map[string]int64)
	}
	r.counts[p.Reason]++
	n := r.counts[p.Reason]
	r.mu.Unlock()

	lg := r.Logger
	if lg == nil {
		lg = slog.Default()
	}
	level := slog.LevelWarn
	if n > LogPerReason {
		level = slog.LevelDebug
	}
	attrs := []slog.Attr{slog.String("reason", p.Reason), slog.String("file", p.File)}
	if p.ImageID >= 0 {
		attrs = append(attrs, slog.Int64("image_id", p.ImageID))
	}
	if p.AnnID >= 0 {
		attrs = append(attrs, slog.Int64("ann_id", p.AnnID))
	}
	if p.Offset >= 0 {
		attrs = append(attrs, slog.Int64("offset", p.Offset))
	}
	if p.Line > 0 {
		attrs = append(attrs, slog.Int("line", p.Line))
	}
	if p.Where != "" {
		attrs = append(attrs, slog.String("where", p.Where))
	}
	if p.Detail != "" {
		attrs = append(attrs, slog.String("detail", p.Detail))
	}
	lg.LogAttrs(context.Background(), level, "skipped bad input", attrs...)
}

// Counts returns a copy of the skip counts by reason.
func (r *Report) Counts() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}

// Total is the number of skipped items of every reason.
func (r *Report) Total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t int64
	for _, n := range r.counts {
		t += n
	}
	return t
}

// String is a one-line summary, reasons sorted, e.g.
// "missing_image_file=2 polygon_odd_length=1", or "none".
func (r *Report) String() string {
	c := r.Counts()
	if len(c) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, c[k])
	}
	return b.String()
}
