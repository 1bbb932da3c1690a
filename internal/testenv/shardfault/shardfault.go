// Package shardfault damages shard files the ways disks and networks do,
// for tests of the readers that must contain the damage: flipped bytes in
// a row group's annotation pages, flipped image bytes, a truncated file and
// a zeroed footer. Each keeps or changes the file size as real damage
// would (flips keep it, truncation does not).
package shardfault

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/parquet/file"
)

// FlipRowGroup flips bytes in the middle of the largest compressed column
// chunk of row group g other than the image column (zstd-compressed
// annotation pages), so that the row group fails to decompress.
func FlipRowGroup(path string, g int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	pf, err := file.NewParquetReader(bytes.NewReader(b))
	if err != nil {
		return err
	}
	md := pf.MetaData()
	if g < 0 || g >= md.NumRowGroups() {
		return fmt.Errorf("%s: row group %d of %d", path, g, md.NumRowGroups())
	}
	rg := md.RowGroup(g)
	var start, size int64
	for c := 0; c < rg.NumColumns(); c++ {
		cc, err := rg.ColumnChunk(c)
		if err != nil {
			return err
		}
		if cc.PathInSchema().String() == "image" {
			continue
		}
		if n := cc.TotalCompressedSize(); n > size {
			start, size = cc.DataPageOffset(), n
		}
	}
	if size < 64 {
		return fmt.Errorf("%s row group %d: no compressed chunk to damage", path, g)
	}
	for k := start + size/2; k < start+size/2+16; k++ {
		b[k] ^= 0x5a
	}
	return os.WriteFile(path, b, 0o644)
}

// FlipImage flips 64 bytes inside the stored copy of image (found by its
// content: the image column is stored uncompressed).
func FlipImage(path string, image []byte) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	at := bytes.Index(b, image)
	if at < 0 || len(image) < 128 {
		return errors.New("shardfault: image bytes not found in " + path)
	}
	for k := at + len(image)/2 - 32; k < at+len(image)/2+32; k++ {
		b[k] ^= 0xa5
	}
	return os.WriteFile(path, b, 0o644)
}

// Truncate cuts the file to half its size.
func Truncate(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.Truncate(path, st.Size()/2)
}

// ZeroFooter zeroes the last 256 bytes: the Parquet footer's end, its
// length and the closing magic.
func ZeroFooter(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	clear(b[max(len(b)-256, 0):])
	return os.WriteFile(path, b, 0o644)
}
