package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/imagehdr"
)

// Reasons of a VerifyProblem.
const (
	VerifyMissing    = "missing"               // the shard file cannot be found or opened
	VerifySize       = "size"                  // its size is not the manifest's
	VerifySHA256     = "sha256"                // its sha256 is not the manifest's
	VerifyUnreadable = "unreadable"            // its footer, schema or a row group cannot be read
	VerifyCounts     = "counts"                // rows or instances disagree with the footer or manifest
	VerifyBadRow     = "bad_row"               // a row's arrays are inconsistent
	VerifyChecksum   = "crc32c"                // a row's image bytes fail image_crc32c
	VerifyPixels     = "pixels"                // a pre-decoded row does not hold width×height×3 pixels
	VerifyTooLarge   = imagehdr.ReasonTooLarge // a row's image is over the pixel bound
	VerifyHeader     = "image_header"          // an encoded image's header is unreadable or disagrees with its row
	VerifyDecode     = "decode"                // VerifyOptions.Decode refused the image
)

// VerifyOptions configure VerifyWith. The zero value checks what Verify
// checks.
type VerifyOptions struct {
	// Decode, when set, is called with every encoded (JPEG or PNG) row's
	// image bytes, format and size, once its crc32c, its header and the
	// pixel bound passed, so that the decoder never sees an image over the
	// bound. It returns an error for an image it cannot decode to that
	// size. Decoding is a loader's concern: this package (which must not
	// import pipeline) takes the decoder from its caller. Without Decode,
	// encoded images are not decoded and their headers are not read.
	Decode func(format string, data []byte, w, h int32) error
	// MaxPixels bounds a row's width·height (<= 0: imagehdr.MaxPixels),
	// checked on every row, before any pixel buffer exists.
	MaxPixels int64
}

// VerifyProblem is one problem VerifyWith found, located as precisely as
// it can be.
type VerifyProblem struct {
	Shard   string `json:"shard"`
	Row     int64  `json:"row"`      // row within the shard; -1 for the shard as a whole
	ImageID int64  `json:"image_id"` // -1 when unknown or not about one image
	Reason  string `json:"reason"`   // one of the Verify* reasons
	Detail  string `json:"detail"`   // the full message, as Error returns it
	Err     error  `json:"-"`
}

// Error is the message naming the shard (and row), then what.
func (p *VerifyProblem) Error() string {
	if p.Err == nil { // as decoded from JSON
		return p.Detail
	}
	return p.Err.Error()
}

// Unwrap returns the underlying error.
func (p *VerifyProblem) Unwrap() error { return p.Err }

// VerifyReport is what VerifyWith checked and found.
type VerifyReport struct {
	Shards int   `json:"shards"`
	Rows   int64 `json:"rows"` // rows read and checked
	// Decodes: encoded images were decoded (VerifyOptions.Decode set).
	Decodes bool `json:"decodes"`
	// Decoded counts the images decoded without a problem: encoded ones
	// through Decode, pre-decoded ones by inflating their pixels.
	Decoded  int64            `json:"decoded"`
	Problems []*VerifyProblem `json:"problems"`
}

// Err joins every problem, one a line; nil when there is none.
func (r *VerifyReport) Err() error {
	errs := make([]error, len(r.Problems))
	for i, p := range r.Problems {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// Verify re-reads every shard and checks it against the manifest: size,
// sha256, the format version and schema in the footer, the row count of
// the footer and of the decoded row groups, every row's image checksum
// (format ≥ 2), that no row is over imagehdr.MaxPixels, that every
// pre-decoded row (format ≥ 3) holds exactly width×height×3 pixels (a zstd
// frame is decompressed to see it), and the number of instances. Encoded
// images are not decoded: VerifyWith with a Decode function does that.
// It returns every problem found (see VerifyWith), joined with
// errors.Join; nil means the set is intact.
func (s *Set) Verify(ctx context.Context) error {
	rep, err := s.VerifyWith(ctx, VerifyOptions{})
	if err != nil {
		return err
	}
	return rep.Err()
}

// VerifyWith checks what Verify does, and with opts.Decode decodes every
// encoded image. A shard whose size or sha256 is stale is still read row by
// row, so that every bad image in it is listed (the reader is hardened
// against damaged files); only a shard that cannot be opened stops at that.
// Every bad row is its own problem, and a row group that fails to read
// does not hide the others. The error is ctx's only.
func (s *Set) VerifyWith(ctx context.Context, opts VerifyOptions) (*VerifyReport, error) {
	rep := &VerifyReport{Shards: len(s.Manifest.Shards), Decodes: opts.Decode != nil, Problems: []*VerifyProblem{}}
	for i := range s.Manifest.Shards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.verifyShard(ctx, i, opts, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func (s *Set) verifyShard(ctx context.Context, i int, opts VerifyOptions, rep *VerifyReport) error {
	info := s.Manifest.Shards[i]
	add := func(row, id int64, reason string, err error) {
		rep.Problems = append(rep.Problems, &VerifyProblem{Shard: info.File, Row: row, ImageID: id, Reason: reason, Detail: err.Error(), Err: err})
	}
	size, err := s.store.Stat(ctx, info.File)
	if err != nil {
		add(-1, -1, VerifyMissing, fmt.Errorf("shard %s: %w", info.File, err))
		return nil
	}
	if err := s.store.Check(ctx, info.File, info.Bytes, info.SHA256); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		reason := VerifySHA256
		if size != info.Bytes {
			reason = VerifySize
		}
		add(-1, -1, reason, fmt.Errorf("shard %w", err))
	}
	// Opened past the size check OpenShard makes, so that a shard of
	// another size is read as far as it can be; the reader bounds every
	// chunk by the file's actual size. The image column is read too, so
	// that each row's bytes are checked against image_crc32c (format ≥ 2)
	// and a mismatch names its row.
	f, err := s.store.OpenFile(ctx, info.File)
	if err != nil {
		add(-1, -1, VerifyMissing, fmt.Errorf("shard %s: %w", info.File, err))
		return nil
	}
	r, err := openShardReader(f, ReadOptions{Columns: []string{ColImageID, ColWidth, ColHeight, ColImageFormat,
		ColImage, ColInstances, ColImageCRC}})
	if err != nil {
		add(-1, -1, VerifyUnreadable, err)
		return nil
	}
	defer r.Close()
	if r.NumRows() != info.Rows {
		add(-1, -1, VerifyCounts, fmt.Errorf("shard %s: footer has %d rows, manifest says %d", info.File, r.NumRows(), info.Rows))
	}
	// The shard's counts are compared only when every row was read, since
	// a bad row's instances are not.
	var rows, inst int64
	clean := true
	var d Decoder
	var img Image
	var pix []byte
	for g := 0; g < r.NumRowGroups(); g++ {
		rec, err := r.ReadRowGroup(ctx, g)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			add(rows, -1, VerifyUnreadable, fmt.Errorf("shard %s row group %d: %w", info.File, g, err))
			rows += r.RowGroupRows(g)
			clean = false
			continue
		}
		n := rec.NumRows()
		func(rec arrow.RecordBatch) {
			defer rec.Release()
			if err := d.Reset(rec); err != nil {
				add(rows, -1, VerifyUnreadable, fmt.Errorf("shard %s row group %d: %w", info.File, g, err))
				clean = false
				return
			}
			for row := 0; row < d.Len(); row++ {
				at := rows + int64(row)
				rep.Rows++
				if err := d.Decode(row, &img); err != nil {
					reason, id := VerifyBadRow, d.imageIDAt(row)
					if errors.Is(err, ErrImageChecksum) {
						reason = VerifyChecksum
					}
					add(at, id, reason, &RowError{Shard: info.File, Row: at, Err: err})
					clean = false
					continue
				}
				inst += int64(len(img.Instances))
				reason, err := verifyImage(&img, opts, &pix)
				if err != nil {
					add(at, img.ImageID, reason, &RowError{Shard: info.File, Row: at, Err: fmt.Errorf("image %d: %w", img.ImageID, err)})
					continue
				}
				if opts.Decode != nil || Predecoded(img.Format) {
					rep.Decoded++
				}
			}
		}(rec)
		rows += n
	}
	if !clean {
		return nil
	}
	if rows != info.Rows {
		add(-1, -1, VerifyCounts, fmt.Errorf("shard %s: decoded %d rows, manifest says %d", info.File, rows, info.Rows))
	}
	if inst != info.Instances {
		add(-1, -1, VerifyCounts, fmt.Errorf("shard %s: decoded %d instances, manifest says %d", info.File, inst, info.Instances))
	}
	return nil
}

// verifyImage checks one row's image: the pixel bound, then pre-decoded
// pixels, or an encoded image's header and decode when opts.Decode is set.
func verifyImage(img *Image, opts VerifyOptions, pix *[]byte) (reason string, err error) {
	// Bytes per pixel 0: a bound on pixels, whatever the colour model.
	if err := imagehdr.Check(int(img.Width), int(img.Height), 0, opts.MaxPixels, 0); err != nil {
		if errors.Is(err, imagehdr.ErrTooLarge) {
			return VerifyTooLarge, err
		}
		return VerifyHeader, err
	}
	if Predecoded(img.Format) {
		p, err := DecodePixels(img.Format, img.Width, img.Height, img.Bytes, *pix)
		*pix = p
		if err != nil {
			return VerifyPixels, err
		}
		return "", nil
	}
	if opts.Decode == nil {
		return "", nil
	}
	h, err := imagehdr.Read(img.Bytes)
	if err != nil {
		return VerifyHeader, err
	}
	// The header, not the row, says what a decoder would allocate.
	if err := h.Check(opts.MaxPixels, 0); err != nil {
		return VerifyTooLarge, err
	}
	if h.Width != int(img.Width) || h.Height != int(img.Height) || h.Format != img.Format {
		return VerifyHeader, fmt.Errorf("header says %dx%d %s, the row %dx%d %s", h.Width, h.Height, h.Format, img.Width, img.Height, img.Format)
	}
	if err := opts.Decode(img.Format, img.Bytes, img.Width, img.Height); err != nil {
		return VerifyDecode, fmt.Errorf("decode: %w", err)
	}
	return "", nil
}

// imageIDAt is row i's image id, or -1 when the row cannot tell it.
func (d *Decoder) imageIDAt(i int) (id int64) {
	defer func() {
		if recover() != nil {
			id = -1
		}
	}()
	if d.imageID == nil || i < 0 || i >= d.imageID.Len() {
		return -1
	}
	return d.imageID.Value(i)
}
