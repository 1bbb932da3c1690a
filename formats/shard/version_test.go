package shard

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// writeV1 writes rows as a format-version-1 shard: the version 2 layout
// without image_crc32c, as the version 1 writer made it.
func writeV1(t *testing.T, path string, rows []Image) { t.Helper(); writeV1As(t, path, rows, "1") }

// writeV1As writes the version 1 layout labelled as version v.
func writeV1As(t *testing.T, path string, rows []Image, v string) {
	t.Helper()
	b := newRowBuilder(memory.NewGoAllocator(), 0, schemaV2)
	defer b.release()
	for i := range rows {
		b.append(&rows[i])
	}
	full := b.flush()
	defer full.Release()
	rec := array.NewRecordBatch(schemaV1, full.Columns()[:colImageCRC], full.NumRows())
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	props, aprops := writerProps()
	fw, err := pqarrow.NewFileWriter(schemaV1, f, props, aprops)
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.AppendKeyValueMetadata(MetadataKeyFormatVersion, v); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeV2 writes rows as one shard of the current format and returns its
// path.
func writeV2(t *testing.T, rows []Image) string {
	t.Helper()
	dir := t.TempDir()
	w, err := Create(dir, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if err := w.Write(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, ShardName(0))
}

func readAll(t *testing.T, path string, opts ReadOptions) ([]Image, *ShardReader) {
	t.Helper()
	r, err := OpenShardFile(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var out []Image
	var d Decoder
	for g := 0; g < r.NumRowGroups(); g++ {
		rec, err := r.ReadRowGroup(context.Background(), g)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Reset(rec); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < d.Len(); i++ {
			var img Image
			if err := d.Decode(i, &img); err != nil {
				t.Fatalf("row %d: %v", i, err)
			}
			out = append(out, cloneImage(img))
		}
		rec.Release()
	}
	return out, r
}

func cloneImage(img Image) Image {
	img.Bytes = bytes.Clone(img.Bytes)
	inst := make([]Instance, len(img.Instances))
	for i, in := range img.Instances {
		var polys [][]float32
		for _, p := range in.Polygons {
			polys = append(polys, append([]float32(nil), p...))
		}
		in.Polygons = polys
		if in.RLE != nil {
			r := *in.RLE
			r.Counts = append([]uint32(nil), r.Counts...)
			in.RLE = &r
		}
		inst[i] = in
	}
	img.Instances = inst
	return img
}

// A shard of a version this package does not know is refused by version,
// naming the file and the versions it reads, before its schema is looked at.
func TestRefusesANewerVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v4.parquet")
	writeV1As(t, path, testImages(3, 2), strconv.Itoa(FormatVersion+1))
	_, err := OpenShardFile(path, ReadOptions{})
	if err == nil || !strings.Contains(err.Error(), "v4.parquet") ||
		!strings.Contains(err.Error(), "format_version 4: this segpipe reads versions 1 to 3") {
		t.Errorf("newer version: %v", err)
	}
}

func TestReadsFormatVersion1(t *testing.T) {
	rows := testImages(3, 12)
	path := filepath.Join(t.TempDir(), "v1.parquet")
	writeV1(t, path, rows)
	got, r := readAll(t, path, ReadOptions{})
	if r.Version() != 1 {
		t.Errorf("version %d, want 1", r.Version())
	}
	if r.Schema().NumFields() != colImageCRC {
		t.Errorf("a version 1 shard has %d columns, want %d", r.Schema().NumFields(), colImageCRC)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d rows, want %d", len(got), len(rows))
	}
	for i := range rows {
		if !reflect.DeepEqual(normal(got[i]), normal(rows[i])) {
			t.Fatalf("row %d differs", i)
		}
	}
	// Asking for the checksum column of a version 1 shard is not an
	// error: it is absent.
	if _, err := OpenShardFile(path, ReadOptions{Columns: []string{ColImage, ColImageCRC}}); err != nil {
		t.Errorf("projection with image_crc32c on version 1: %v", err)
	}
}

// normal makes nil and empty slices compare equal.
func normal(img Image) Image {
	img.SourceWidth, img.SourceHeight = img.SourceSize()
	if len(img.Instances) == 0 {
		img.Instances = nil
	}
	for i := range img.Instances {
		if len(img.Instances[i].Polygons) == 0 {
			img.Instances[i].Polygons = nil
		}
	}
	return img
}

// Issue 16: flipped bytes inside the image column were used silently.
func TestImageChecksumCatchesFlippedBytes(t *testing.T) {
	rows := testImages(5, 8)
	path := writeV2(t, rows)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Flip 64 bytes inside row 3's image bytes, found by content (the
	// image column is stored uncompressed).
	at := bytes.Index(b, rows[3].Bytes)
	if at < 0 {
		t.Fatal("row 3's image bytes not found in the file")
	}
	for k := 0; k < 64; k++ {
		b[at+100+k] ^= 0xa5
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := OpenShardFile(path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Version() != versionEncoded {
		t.Errorf("writer wrote version %d, want %d", r.Version(), versionEncoded)
	}
	rec, err := r.ReadRowGroup(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	var d Decoder
	if err := d.Reset(rec); err != nil {
		t.Fatal(err)
	}
	bad := map[int]bool{}
	for i := 0; i < d.Len(); i++ {
		var img Image
		err := d.Decode(i, &img)
		var ce *ChecksumError
		switch {
		case err == nil:
		case errors.As(err, &ce) && errors.Is(err, ErrImageChecksum):
			bad[i] = true
			if img.Bytes != nil || ce.ImageID != rows[i].ImageID {
				t.Errorf("row %d: damaged bytes handed out or wrong image id in %v", i, err)
			}
		default:
			t.Fatalf("row %d: %v", i, err)
		}
	}
	if !reflect.DeepEqual(bad, map[int]bool{3: true}) {
		t.Errorf("rows failing their checksum: %v, want only row 3", bad)
	}
}

// The stored Arrow schema of a fresh shard is exactly this build's
// serialisation (so guardStoredSchema leaves it to pqarrow), and a shard
// whose stored schema is hidden still reads with the same schema.
func TestStoredSchemaGuard(t *testing.T) {
	for _, v := range []int{1, 2} {
		path := filepath.Join(t.TempDir(), "s.parquet")
		rows := testImages(9, 5)
		if v == 1 {
			writeV1(t, path, rows)
		} else {
			path = writeV2(t, rows)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		pf, err := file.NewParquetReader(f)
		if err != nil {
			t.Fatal(err)
		}
		kv := pf.MetaData().KeyValueMetadata()
		guardStoredSchema(kv, schemaOf(v))
		if kv.FindValue(arrowSchemaKey) == nil {
			t.Errorf("version %d: the writer's own stored schema was hidden", v)
		}
		// Hide it and let pqarrow infer the schema from Parquet's.
		for _, e := range kv {
			if e.Key == arrowSchemaKey {
				e.Key = "hidden"
			}
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.NewGoAllocator())
		if err != nil {
			t.Fatal(err)
		}
		got, err := fr.Schema()
		if err != nil {
			t.Fatal(err)
		}
		if !sameFields(got, schemaOf(v)) {
			t.Errorf("version %d: schema inferred from Parquet differs:\n%s", v, got)
		}
		f.Close()
	}
}
