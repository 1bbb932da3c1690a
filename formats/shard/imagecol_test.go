package shard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// readAllGroups reads every row group of path, with the image chunks read
// directly or through pqarrow.
func readAllGroups(t *testing.T, path string, opts ReadOptions, direct bool) []arrow.RecordBatch {
	t.Helper()
	defer func(v bool) { directImages = v }(directImages)
	directImages = direct
	r, err := OpenShardFile(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if direct != (r.imgLeaf >= 0) && r.imageLeaf() >= 0 {
		t.Fatalf("direct=%v but the reader's image leaf is %d", direct, r.imgLeaf)
	}
	var out []arrow.RecordBatch
	for g := 0; g < r.NumRowGroups(); g++ {
		rec, err := r.ReadRowGroup(context.Background(), g)
		if err != nil {
			t.Fatalf("row group %d: %v", g, err)
		}
		out = append(out, rec)
	}
	return out
}

// sameRecords compares two reads column by column, by name and value.
func sameRecords(t *testing.T, what string, a, b []arrow.RecordBatch) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d row groups, want %d", what, len(a), len(b))
	}
	for g := range a {
		if a[g].NumCols() != b[g].NumCols() || a[g].NumRows() != b[g].NumRows() {
			t.Fatalf("%s: row group %d is %dx%d, want %dx%d", what, g, a[g].NumRows(), a[g].NumCols(), b[g].NumRows(), b[g].NumCols())
		}
		for c := 0; c < int(a[g].NumCols()); c++ {
			fa, fb := a[g].Schema().Field(c), b[g].Schema().Field(c)
			if fa.Name != fb.Name || !arrow.TypeEqual(fa.Type, fb.Type) {
				t.Fatalf("%s: row group %d column %d is %s %s, want %s %s", what, g, c, fa.Name, fa.Type, fb.Name, fb.Type)
			}
			if !array.Equal(a[g].Column(c), b[g].Column(c)) {
				t.Fatalf("%s: row group %d column %s differs", what, g, fa.Name)
			}
		}
	}
}

func release(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

func TestDirectImagesMatchPqarrow(t *testing.T) {
	dir := t.TempDir()
	imgs := testImages(5, 40)
	imgs[3].Bytes = imgs[3].Bytes[:1] // short values next to long ones
	writeAll(t, dir, testOpts, imgs, -1)
	paths, _ := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	if len(paths) < 2 {
		t.Fatalf("%d shards, want several", len(paths))
	}
	for _, cols := range [][]string{nil, {ColImage}, {ColImageID, ColImage, ColImageCRC}, {ColImageID, ColInstances}} {
		for _, p := range paths {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			direct := readAllGroups(t, p, ReadOptions{Columns: cols, Allocator: mem}, true)
			plain := readAllGroups(t, p, ReadOptions{Columns: cols}, false)
			sameRecords(t, filepath.Base(p), direct, plain)
			release(direct)
			release(plain)
			mem.AssertSize(t, 0)
		}
	}
	// And the rows themselves, decoded from the direct read.
	var d Decoder
	var got Image
	k := 0
	for _, p := range paths {
		recs := readAllGroups(t, p, ReadOptions{}, true)
		for _, rec := range recs {
			if err := d.Reset(rec); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < d.Len(); i++ {
				if err := d.Decode(i, &got); err != nil {
					t.Fatal(err)
				}
				if diff := equalImage(&got, &imgs[k]); diff != "" {
					t.Fatalf("row %d: %s", k, diff)
				}
				k++
			}
		}
		release(recs)
	}
	if k != len(imgs) {
		t.Fatalf("read %d rows, wrote %d", k, len(imgs))
	}
}

// rewrite writes the rows of the shard at src again with props, keeping
// its segpipe metadata, and returns the new file's path.
func rewrite(t *testing.T, src string, props *parquet.WriterProperties) string {
	t.Helper()
	recs := readAllGroups(t, src, ReadOptions{}, false)
	defer release(recs)
	r, err := OpenShardFile(src, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kv := r.pf.MetaData().KeyValueMetadata()
	r.Close()
	path := filepath.Join(t.TempDir(), "part-00000.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, ap := writerProps()
	fw, err := pqarrow.NewFileWriter(recs[0].Schema(), f, props, ap)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if err := fw.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range kv.Keys() {
		if k != arrowSchemaKey {
			if err := fw.AppendKeyValueMetadata(k, *kv.FindValue(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDirectImagesLayouts(t *testing.T) {
	dir := t.TempDir()
	writeAll(t, dir, WriterOptions{Categories: testOpts.Categories}, testImages(6, 24), -1)
	src := filepath.Join(dir, ShardName(0))
	base := []parquet.WriterProperty{
		parquet.WithDictionaryDefault(false),
		parquet.WithStats(false),
		parquet.WithCompressionFor(ColImage, compress.Codecs.Uncompressed),
	}
	for _, tc := range []struct {
		name   string
		props  []parquet.WriterProperty
		direct bool
	}{
		{"v1 pages of 1 KiB", []parquet.WriterProperty{parquet.WithDataPageSize(1 << 10)}, true},
		{"v2 pages", []parquet.WriterProperty{parquet.WithDataPageVersion(parquet.DataPageV2), parquet.WithDataPageSize(2 << 10)}, true},
		{"one page per chunk", []parquet.WriterProperty{parquet.WithDataPageSize(1 << 30)}, true},
		{"zstd images", []parquet.WriterProperty{parquet.WithCompressionFor(ColImage, compress.Codecs.Zstd)}, false},
		{"delta byte arrays", []parquet.WriterProperty{parquet.WithEncodingFor(ColImage, parquet.Encodings.DeltaLengthByteArray)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := rewrite(t, src, parquet.NewWriterProperties(append(append([]parquet.WriterProperty(nil), base...), tc.props...)...))
			r, err := OpenShardFile(p, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for g := 0; g < r.NumRowGroups(); g++ {
				rec, err := r.readDirect(context.Background(), g)
				if tc.direct && err != nil {
					t.Fatalf("row group %d not read directly: %v", g, err)
				}
				if !tc.direct && !errors.Is(err, errNotPlainImages) {
					t.Fatalf("row group %d: read directly (err %v), want it left to pqarrow", g, err)
				}
				if rec != nil {
					rec.Release()
				}
			}
			r.Close()
			direct := readAllGroups(t, p, ReadOptions{}, true)
			plain := readAllGroups(t, src, ReadOptions{}, false)
			sameRecords(t, tc.name, direct, plain)
			release(direct)
			release(plain)
		})
	}
}

// plainChunk encodes values as one uncompressed PLAIN v1 data page per
// group of k values, the way arrow-go writes them.
func plainChunk(values [][]byte, k int, crc bool) []byte {
	var out []byte
	for i := 0; i < len(values); i += k {
		var body []byte
		n := 0
		for _, v := range values[i:min(i+k, len(values))] {
			body = append(body, byte(len(v)), byte(len(v)>>8), byte(len(v)>>16), byte(len(v)>>24))
			body = append(body, v...)
			n++
		}
		out = append(out, pageHeaderBytes(pageData, len(body), n, crc, body)...)
		out = append(out, body...)
	}
	return out
}

// pageHeaderBytes is a Thrift compact PageHeader with a v1 data page
// header (whatever kind says the page is).
func pageHeaderBytes(kind, size, values int, crc bool, body []byte) []byte {
	zz := func(v int) []byte { return binary.AppendUvarint(nil, uint64(uint32(int32(v)<<1)^uint32(int32(v)>>31))) }
	h := []byte{0x15}
	h = append(h, zz(kind)...)
	h = append(h, 0x15)
	h = append(h, zz(size)...)
	h = append(h, 0x15)
	h = append(h, zz(size)...)
	if crc {
		h = append(h, 0x15)
		h = append(h, zz(int(int32(crc32.ChecksumIEEE(body))))...)
		h = append(h, 0x1c) // field 5, struct
	} else {
		h = append(h, 0x2c) // field 5 (delta 2), struct
	}
	h = append(h, 0x15)
	h = append(h, zz(values)...)
	h = append(h, 0x15, 0x00) // encoding PLAIN
	h = append(h, 0x15, 0x06) // definition levels RLE
	h = append(h, 0x15, 0x06) // repetition levels RLE
	h = append(h, 0x00, 0x00) // end of DataPageHeader, of PageHeader
	return h
}

// dictionaryFirst is plainChunk(vals) after a page that says it is a
// dictionary page.
func dictionaryFirst(vals [][]byte) []byte {
	dict := []byte{1, 0, 0, 0, 'a'}
	out := append(pageHeaderBytes(2, len(dict), 1, false, dict), dict...)
	return append(out, plainChunk(vals, 4, false)...)
}

func TestPlainImages(t *testing.T) {
	vals := [][]byte{[]byte("first"), {}, bytes.Repeat([]byte{7}, 300), []byte("x")}
	for _, tc := range []struct {
		name string
		data []byte
		n    int
		ok   bool
	}{
		{"one page", plainChunk(vals, 4, false), 4, true},
		{"a page a value", plainChunk(vals, 1, false), 4, true},
		{"checksummed pages", plainChunk(vals, 2, true), 4, true},
		{"fewer values than the footer says", plainChunk(vals, 2, false), 5, false},
		{"more values than the footer says", plainChunk(vals, 2, false), 3, false},
		{"truncated page", plainChunk(vals, 4, false)[:40], 4, false},
		{"empty chunk", nil, 1, false},
		{"garbage", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 4, false},
		{"dictionary page", dictionaryFirst(vals), 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := append([]byte(nil), tc.data...)
			offsets := make([]int32, tc.n+1)
			end, err := plainImages(data, offsets, tc.n)
			if !tc.ok {
				if !errors.Is(err, errNotPlainImages) {
					t.Fatalf("accepted (end %d, err %v)", end, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if got := data[offsets[i]:offsets[i+1]]; !bytes.Equal(got, v) {
					t.Fatalf("value %d is %q, want %q", i, got, v)
				}
			}
			if int(offsets[len(vals)]) != end {
				t.Fatalf("end %d, last offset %d", end, offsets[len(vals)])
			}
		})
	}
	// A flipped checksum refuses the page.
	data := plainChunk(vals, 4, true)
	data[len(data)-1] ^= 1
	if _, err := plainImages(data, make([]int32, 5), 4); !errors.Is(err, errNotPlainImages) {
		t.Fatalf("a page failing its checksum was accepted: %v", err)
	}
}

// FuzzPlainImages checks that any chunk bytes are either refused or give
// n values whose offsets are non-decreasing and inside the buffer.
//
//	go test ./formats/shard -run '^$' -fuzz FuzzPlainImages -fuzztime 1m
func FuzzPlainImages(f *testing.F) {
	vals := [][]byte{[]byte("first"), {}, bytes.Repeat([]byte{7}, 300), []byte("x")}
	f.Add(plainChunk(vals, 4, false), 4)
	f.Add(plainChunk(vals, 1, true), 4)
	f.Add(plainChunk(vals, 3, false), 4)
	f.Add([]byte{0x15, 0x00, 0x19, 0xfc, 0xff, 0xff, 0xff, 0x0f}, 1) // a list claiming many elements
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		orig := append([]byte(nil), data...)
		offsets := make([]int32, n+1)
		end, err := plainImages(data, offsets, n)
		if err != nil {
			if !errors.Is(err, errNotPlainImages) {
				t.Fatalf("error not marked as a layout refusal: %v", err)
			}
			return
		}
		if end > len(data) || int(offsets[n]) != end || offsets[0] != 0 {
			t.Fatalf("end %d, offsets %d..%d, %d bytes", end, offsets[0], offsets[n], len(data))
		}
		for i := 0; i < n; i++ {
			if offsets[i] > offsets[i+1] {
				t.Fatalf("offsets decrease at %d", i)
			}
		}
		// Parsing the accepted chunk afresh with a brute-force reading
		// of each page gives the same values.
		if got := bruteValues(t, orig, n); len(got) != n {
			t.Fatalf("brute force read %d values, want %d", len(got), n)
		} else {
			for i, v := range got {
				if !bytes.Equal(v, data[offsets[i]:offsets[i+1]]) {
					t.Fatalf("value %d differs from the brute-force read", i)
				}
			}
		}
	})
}

// bruteValues re-reads an accepted chunk page by page without moving
// anything: the reference the in-place compaction is checked against.
func bruteValues(t *testing.T, data []byte, n int) [][]byte {
	var out [][]byte
	pos := 0
	for pos < len(data) {
		h, hlen, err := readPageHeader(data[pos:])
		if err != nil {
			t.Fatalf("accepted chunk has an unreadable page at %d: %v", pos, err)
		}
		body := data[pos+hlen : pos+hlen+h.compressed]
		for p := 0; p < len(body); {
			l := int(uint32(body[p]) | uint32(body[p+1])<<8 | uint32(body[p+2])<<16 | uint32(body[p+3])<<24)
			out = append(out, body[p+4:p+4+l])
			p += 4 + l
		}
		pos += hlen + h.compressed
	}
	return out
}
