package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// Verify re-reads every shard and checks it against the manifest: size,
// sha256, the format version and schema in the footer, the row count of
// the footer and of the decoded row groups, every row's image checksum
// (format ≥ 2), that every pre-decoded row (format ≥ 3) holds exactly
// width×height×3 pixels (a zstd frame is decompressed to see it), and the
// number of instances.
// It returns every problem found, each naming its shard (every bad row and
// every unreadable row group of a shard its own), joined with errors.Join;
// nil means the set is intact.
func (s *Set) Verify(ctx context.Context) error {
	var errs []error
	for i := range s.Manifest.Shards {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.verifyShard(ctx, i); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Set) verifyShard(ctx context.Context, i int) error {
	info := s.Manifest.Shards[i]
	if _, err := s.store.Stat(ctx, info.File); err != nil {
		return fmt.Errorf("shard %s: %w", info.File, err)
	}
	if err := s.store.Check(ctx, info.File, info.Bytes, info.SHA256); err != nil {
		return fmt.Errorf("shard %w", err)
	}
	// The image column is read too, so that each row's bytes are checked
	// against image_crc32c (format ≥ 2) and a mismatch names its row.
	r, err := s.OpenShard(i, ReadOptions{Columns: []string{ColImageID, ColWidth, ColHeight, ColImageFormat,
		ColImage, ColInstances, ColImageCRC}})
	if err != nil {
		return err
	}
	defer r.Close()
	if r.NumRows() != info.Rows {
		return fmt.Errorf("shard %s: footer has %d rows, manifest says %d", info.File, r.NumRows(), info.Rows)
	}
	// Every bad row is its own problem, and a row group that fails to read
	// does not hide the others; the shard's counts are compared only when
	// every row was read, since a bad row's instances are not.
	var errs []error
	var rows, inst int64
	var d Decoder
	var img Image
	var pix []byte
	for g := 0; g < r.NumRowGroups(); g++ {
		rec, err := r.ReadRowGroup(ctx, g)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Errorf("shard %s row group %d: %w", info.File, g, err))
			rows += r.RowGroupRows(g)
			continue
		}
		n := rec.NumRows()
		rowErrs, err := func(rec arrow.RecordBatch) ([]error, error) {
			defer rec.Release()
			if err := d.Reset(rec); err != nil {
				return nil, fmt.Errorf("shard %s row group %d: %w", info.File, g, err)
			}
			var errs []error
			for row := 0; row < d.Len(); row++ {
				if err := d.Decode(row, &img); err != nil {
					errs = append(errs, &RowError{Shard: info.File, Row: rows + int64(row), Err: err})
					continue
				}
				if Predecoded(img.Format) {
					if pix, err = DecodePixels(img.Format, img.Width, img.Height, img.Bytes, pix); err != nil {
						errs = append(errs, &RowError{Shard: info.File, Row: rows + int64(row), Err: fmt.Errorf("image %d: %w", img.ImageID, err)})
						continue
					}
				}
				inst += int64(len(img.Instances))
			}
			return errs, nil
		}(rec)
		rows += n
		errs = append(errs, rowErrs...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if rows != info.Rows {
		return fmt.Errorf("shard %s: decoded %d rows, manifest says %d", info.File, rows, info.Rows)
	}
	if inst != info.Instances {
		return fmt.Errorf("shard %s: decoded %d instances, manifest says %d", info.File, inst, info.Instances)
	}
	return nil
}
