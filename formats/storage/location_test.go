package storage

import (
	"strings"
	"testing"
)

func TestParseLocation(t *testing.T) {
	tests := []struct {
		in      string
		scheme  string
		dir     string
		bucket  string
		prefix  string
		query   string
		wantErr string
	}{
		{in: "shards/val", dir: "shards/val"},
		{in: "./shards//val/", dir: "shards/val"},
		{in: "/data/shards", dir: "/data/shards"},
		{in: "file:///data/shards", dir: "/data/shards"},
		{in: "file://localhost/data/x", dir: "/data/x"},
		{in: "s3://b", scheme: "s3", bucket: "b"},
		{in: "s3://b/", scheme: "s3", bucket: "b"},
		{in: "s3://b/coco/val", scheme: "s3", bucket: "b", prefix: "coco/val/"},
		{in: "S3://b/p/", scheme: "s3", bucket: "b", prefix: "p/"},
		{in: "s3://b/p?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true", scheme: "s3", bucket: "b", prefix: "p/",
			query: "endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1&use_path_style=true"},
		{in: "gs://bkt/a/b", scheme: "gs", bucket: "bkt", prefix: "a/b/"},
		{in: "azblob://ctr/x", scheme: "azblob", bucket: "ctr", prefix: "x/"},
		{in: "", wantErr: "empty"},
		{in: "s3://KEY:SECRET@b/p", wantErr: "credentials"},
		{in: "s3:///p", wantErr: "no bucket"},
		{in: "s3://b/a/../c", wantErr: "segment"},
		{in: "s3://b/a//c", wantErr: "segment"},
		{in: "s3://b/p?prefix=q", wantErr: "prefix"},
		{in: "s3://b/p#frag", wantErr: "fragment"},
		{in: "file://host/x", wantErr: "absolute path"},
		{in: "file:///x?a=b", wantErr: "no query"},
		{in: "http://example.com/x", wantErr: "not supported"},
		{in: "mem://x", wantErr: "not supported"},
	}
	for _, tc := range tests {
		l, err := ParseLocation(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "SECRET") {
				t.Errorf("%q: error repeats the secret: %v", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if l.Scheme != tc.scheme || l.Dir != tc.dir || l.Bucket != tc.bucket || l.Prefix != tc.prefix || l.Query.Encode() != tc.query {
			t.Errorf("%q: got %+v", tc.in, l)
		}
	}
}

func TestLocationJoinAndBucketURL(t *testing.T) {
	l, err := ParseLocation("s3://b/p/q?region=eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Join("manifest.json"), "s3://b/p/q/manifest.json"; got != want {
		t.Errorf("Join = %q, want %q", got, want)
	}
	if got, want := l.bucketURL(), "s3://b?region=eu-west-1"; got != want {
		t.Errorf("bucketURL = %q, want %q", got, want)
	}
}

// FuzzParseLocation: never a panic; a parsed location renders to a string
// that parses to the same location, and a bucket prefix never holds an
// empty, "." or ".." segment.
func FuzzParseLocation(f *testing.F) {
	for _, s := range []string{"shards", "/a/b", "file:///a", "s3://b/p?endpoint=http://x:1&use_path_style=true",
		"gs://b/a/b/", "azblob://c", "s3://u:p@b", "s3://b/../x", "s3://b/%2e%2e/x", "file://h/x", "x://", "s3://b/p%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLocation(s)
		if err != nil {
			return
		}
		if l.IsBucket() {
			if l.Bucket == "" {
				t.Fatalf("%q: empty bucket", s)
			}
			if l.Prefix != "" {
				if !strings.HasSuffix(l.Prefix, "/") {
					t.Fatalf("%q: prefix %q without trailing slash", s, l.Prefix)
				}
				for _, seg := range strings.Split(strings.TrimSuffix(l.Prefix, "/"), "/") {
					if seg == "" || seg == "." || seg == ".." {
						t.Fatalf("%q: prefix %q has segment %q", s, l.Prefix, seg)
					}
				}
			}
		}
		l2, err := ParseLocation(l.String())
		if err != nil {
			t.Fatalf("%q → %q: %v", s, l.String(), err)
		}
		if l2.String() != l.String() || l2.Scheme != l.Scheme || l2.Bucket != l.Bucket || l2.Prefix != l.Prefix || l2.Dir != l.Dir {
			t.Fatalf("%q: round trip %+v → %q → %+v", s, l, l.String(), l2)
		}
	})
}
