package coco

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/segpipe/segpipe/datasets"
)

// parseBytes runs the parser (no image checks) over raw.
func parseBytes(raw []byte, strict bool) (*parser, error) {
	p := newParser(bytes.NewReader(raw), "test.json", strict, &datasets.Report{Logger: quiet}, int64(len(raw)))
	return p, p.parse()
}

// TestTinyBuffersParseTheSame refills the read buffer at every possible
// token boundary: the result must not depend on where refills fall.
func TestTinyBuffersParseTheSame(t *testing.T) {
	files := []string{filepath.Join(fixtures, "good-edge", "annotations.json")}
	for _, name := range []string{"bad-nan-inf", "bad-invalid-rle-string", "bad-polygon-four-numbers", "bad-duplicate-ann-id"} {
		files = append(files, filepath.Join(fixtures, name, "annotations.json"))
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := parseBytes(raw, false)
		if err != nil {
			t.Fatal(err)
		}
		defer func(n int) { scanBufferSize = n }(scanBufferSize)
		for _, n := range []int{1, 2, 3, 5, 7, 13, 64} {
			scanBufferSize = n
			got, err := parseBytes(raw, false)
			if err != nil {
				t.Fatalf("%s buffer %d: %v", f, n, err)
			}
			if !reflect.DeepEqual(got.store, want.store) || !reflect.DeepEqual(got.images, want.images) ||
				!reflect.DeepEqual(got.cats, want.cats) || !reflect.DeepEqual(got.annImage, want.annImage) ||
				!reflect.DeepEqual(got.rep.Counts(), want.rep.Counts()) {
				t.Fatalf("%s: buffer of %d bytes parses differently", f, n)
			}
		}
		scanBufferSize = 1 << 20
	}
}

func TestParseNumberMatchesStrconv(t *testing.T) {
	for _, s := range []string{"0", "-0", "1", "-1", "0.5", "123.45", "239.97", "0.1", "0.3333333333333333",
		"1e3", "1E-3", "-2.5e+2", "9007199254740993", "123456789012345678901234567890", "0.000001",
		"1.7976931348623157e308", "4.9e-324", "640.0000000000001", "12.000", "0.00000000000000000000001"} {
		want, err := strconv.ParseFloat(s, 64)
		got, ok := parseNumber([]byte(s))
		if err != nil || !ok || math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("parseNumber(%q) = %v, %v; strconv %v, %v", s, got, ok, want, err)
		}
	}
	for _, s := range []string{"", "-", "01", "1.", ".5", "+1", "1e", "1e+", "0x10", "inf", "nan", "1_0", "1.2.3", "--1", "Infinity1"} {
		if v, ok := parseNumber([]byte(s)); ok {
			t.Errorf("parseNumber(%q) = %v, want rejected (not JSON)", s, v)
		}
	}
	for _, s := range []string{"NaN", "Infinity", "-Infinity", "1e400"} {
		if v, ok := parseNumber([]byte(s)); !ok || !math.IsNaN(v) && !math.IsInf(v, 0) {
			t.Errorf("parseNumber(%q) = %v, %v, want a non-finite number", s, v, ok)
		}
	}
}

func TestMalformedDocuments(t *testing.T) {
	for _, tc := range []struct {
		doc, msg string
	}{
		{``, "byte 0: malformed_json: unexpected end of input"},
		{`[]`, "byte 0: malformed_json: expecting '{'"},
		{`{"images": [], "categories": []} x`, "byte 33: malformed_json: data after the end"},
		{`{"images": [], "categories": [],}`, "byte 32: malformed_json: trailing comma"},
		{`{"images": [{"id": 1,, }], "categories": []}`, "byte 21: malformed_json: expecting a string key"},
		{`{"images": [], "categories": [{"name": "a\q"}]}`, "byte 42: malformed_json: invalid escape \\q"},
		{`{"images": [], "categories": [{"name": "a` + "\n" + `"}]}`, "byte 41: malformed_json: control character"},
		{`{"images": [], "annotations": [{"bbox": [1, 2, 3, 01]}], "categories": []}`, "byte 50: malformed_json: invalid number \"01\""},
		{`{"images": [], "annotations": [{"iscrowd": tru}], "categories": []}`, "byte 43: malformed_json: invalid literal \"tru\""},
		{`{"images": [], "images": [], "categories": []}`, "byte 15: malformed_json: key \"images\" appears twice"},
		{`{"images": {}, "categories": []}`, "byte 11 images: invalid_field: \"images\" is a object, want an array"},
		{`{"annotations": []}`, "missing_field: no \"images\" array"},
		{`{"images": [], "categories": [{"id": 1, "name": "\ud800"}]}`, ""},
		{`{"images": [], "annotations": [{"id": 4, "iscrowd": null}], "categories": []}`, "annotations[0].iscrowd annotation 4: invalid_field: is null, want 0 or 1"},
	} {
		_, err := parseBytes([]byte(tc.doc), true)
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%s: %v, want no error", tc.doc, err)
		case tc.msg != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.msg))):
			t.Errorf("%s: error %v, want %q", tc.doc, err, tc.msg)
		}
	}
}

func TestStringEscapes(t *testing.T) {
	raw := []byte(`{"images": [], "categories": [{"id": 1, "name": "a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00\ud800x\udc00"}]}`)
	for _, n := range []int{1, 3, 1 << 20} {
		scanBufferSize = n
		p, err := parseBytes(raw, true)
		scanBufferSize = 1 << 20
		if err != nil {
			t.Fatal(err)
		}
		if got, want := p.cats[0].Name, "a\"b\\c/d\b\f\n\r\té😀\uFFFDx\uFFFD"; got != want {
			t.Errorf("buffer %d: name %q, want %q", n, got, want)
		}
	}
}
