package shard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/segpipe/segpipe/formats/storage"
)

// Manifest is the content of manifest.json, the single entry point of a
// shard directory. It is written last, atomically, so a directory with a
// manifest is a complete conversion.
type Manifest struct {
	FormatVersion int `json:"format_version"`
	// Source says where the rows came from, as given to the converter.
	Source Source `json:"source"`
	// Categories is the dataset's category table ordered by Index.
	Categories []Category `json:"categories"`
	Rows       int64      `json:"rows"`
	Instances  int64      `json:"instances"`
	Bytes      int64      `json:"bytes"`
	// ShardBytes and RowGroupBytes are the targets the writer used.
	ShardBytes    int64 `json:"shard_bytes"`
	RowGroupBytes int64 `json:"row_group_bytes"`
	// Pixels is set when the rows hold pre-decoded pixels (format
	// version 3): their encoding, the max side they were resized to and
	// the filter. Absent for original encodings.
	Pixels *Pixels `json:"pixels,omitempty"`
	// Shards lists the files in row order.
	Shards []ShardInfo `json:"shards"`
	// Skipped counts the source items left out of the rows, by reason
	// (e.g. "missing_image_file"). Nothing is dropped without a count here.
	Skipped map[string]int64 `json:"skipped"`
}

// Source describes the input of a conversion.
type Source struct {
	Kind string            `json:"kind"` // "coco", "yolo", ...
	Args map[string]string `json:"args,omitempty"`
}

// ShardInfo describes one Parquet file of a shard directory.
type ShardInfo struct {
	File      string `json:"file"` // name relative to the directory
	Rows      int64  `json:"rows"`
	Instances int64  `json:"instances"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"` // lowercase hex of the whole file
}

// ErrNoManifest is returned by Open and ReadManifest when dir holds no
// manifest.json (not a shard directory, or a conversion that has not
// finished: see --resume).
var ErrNoManifest = errors.New("no " + ManifestName)

// ReadManifest reads and checks manifest.json at dir, a path or a URL.
func ReadManifest(dir string) (*Manifest, error) {
	d, err := storage.Open(context.Background(), dir, nil)
	if err != nil {
		return nil, err
	}
	return readManifest(context.Background(), d)
}

func readManifest(ctx context.Context, d *storage.Dir) (*Manifest, error) {
	var m Manifest
	if err := readManifestFile(ctx, d, ManifestName, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// readManifestFile decodes and checks the file name of d; a missing
// manifest.json is ErrNoManifest.
func readManifestFile(ctx context.Context, d *storage.Dir, name string, m interface{ check() error }) error {
	path := d.Join(name)
	b, err := d.ReadFile(ctx, name)
	if errors.Is(err, os.ErrNotExist) && name == ManifestName {
		return fmt.Errorf("%s: %w", d, ErrNoManifest)
	}
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := m.check(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func (m *Manifest) check() error {
	if m.FormatVersion < MinFormatVersion || m.FormatVersion > FormatVersion {
		return fmt.Errorf("format_version %d: this segpipe reads versions %d to %d", m.FormatVersion, MinFormatVersion, FormatVersion)
	}
	if m.Pixels != nil {
		if m.FormatVersion < 3 {
			return fmt.Errorf("pixels needs format_version 3 or later, not %d", m.FormatVersion)
		}
		if err := m.Pixels.check(); err != nil {
			return err
		}
	}
	var rows, inst, size int64
	seen := map[string]bool{}
	for i, s := range m.Shards {
		if s.File == "" || filepath.Base(s.File) != s.File {
			return fmt.Errorf("shards[%d]: file %q must be a plain file name", i, s.File)
		}
		if seen[s.File] {
			return fmt.Errorf("shards[%d]: file %q listed twice", i, s.File)
		}
		seen[s.File] = true
		if s.Rows < 0 || s.Instances < 0 || s.Bytes < 0 {
			return fmt.Errorf("shards[%d] %s: negative count", i, s.File)
		}
		rows += s.Rows
		inst += s.Instances
		size += s.Bytes
	}
	if rows != m.Rows || inst != m.Instances || size != m.Bytes {
		return fmt.Errorf("totals rows=%d instances=%d bytes=%d disagree with the shards' sums %d/%d/%d",
			m.Rows, m.Instances, m.Bytes, rows, inst, size)
	}
	for i, c := range m.Categories {
		if c.Index != int32(i) {
			return fmt.Errorf("categories[%d] (id %d) has index %d: want contiguous indices in order", i, c.ID, c.Index)
		}
	}
	return nil
}

// encode renders m deterministically (encoding/json sorts map keys).
func (m *Manifest) encode() ([]byte, error) { return encodeJSON(m) }

// encodeJSON is the one rendering of manifests: two-space indent, final
// newline.
func encodeJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
