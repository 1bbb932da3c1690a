package remote

import (
	"errors"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
)

// TestParseLocalRequestDiffersOnlyInShards: a local request names a shard
// location (a path or URL), which a ticket may not; every other field is
// checked as a ticket's, with the same message.
func TestParseLocalRequestDiffersOnlyInShards(t *testing.T) {
	tests := []struct {
		name        string
		json        string
		ticketErr   string // "" accepted
		localErr    string
		sameMessage bool
	}{
		{"absolute path", `{"version":1,"shards":"/data/shards/train"}`, "want a path relative to the shard root", "", false},
		{"bucket URL", `{"version":1,"shards":"s3://bucket/shards"}`, "", "", false},
		{"parent directory", `{"version":1,"shards":"../train"}`, "leaves the shard root", "", false},
		{"no shards", `{"version":1}`, "", "shards: want a shard directory or URL", false},
		{"wrong version", `{"version":2,"shards":"x"}`, "version 2", "version 2", true},
		{"unknown field", `{"version":1,"shards":"x","batch":3}`, `unknown field "batch"`, `unknown field "batch"`, true},
		{"bad masks", `{"version":1,"shards":"x","masks":"rle"}`, `masks "rle"`, `masks "rle"`, true},
		{"bad imgsz", `{"version":1,"shards":"x","imgsz":642}`, "not a multiple of the mask stride", "not a multiple of the mask stride", true},
		{"trailing data", `{"version":1,"shards":"x"} {}`, "trailing data", "trailing data", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, terr := ParseRequest([]byte(tc.json))
			_, lerr := ParseLocalRequest([]byte(tc.json))
			for _, c := range []struct {
				what string
				err  error
				want string
			}{{"ticket", terr, tc.ticketErr}, {"local", lerr, tc.localErr}} {
				switch {
				case c.want == "" && c.err != nil:
					t.Errorf("%s: %v", c.what, c.err)
				case c.want != "" && (c.err == nil || !strings.Contains(c.err.Error(), c.want) || !errors.Is(c.err, ErrBadRequest)):
					t.Errorf("%s: %v, want a bad request saying %q", c.what, c.err, c.want)
				}
			}
			if tc.sameMessage && (terr == nil || lerr == nil || terr.Error() != lerr.Error()) {
				t.Errorf("messages differ: ticket %v, local %v", terr, lerr)
			}
		})
	}
}

// TestPlanSchemaFollowsTheTransport: a plan's schema is the batch schema
// for dense masks and its windowed form for windowed ones; a request over
// the base's memory limit is refused with the loader's figures.
func TestPlanSchemaFollowsTheTransport(t *testing.T) {
	for _, tc := range []struct {
		masks    string
		windowed bool
	}{{"", false}, {MasksDense, false}, {MasksWindowed, true}} {
		p, err := NewPlan(Request{Version: RequestVersion, ImgSz: 64, Masks: tc.masks}, pipeline.Config{MaxMemory: -1})
		if err != nil {
			t.Fatal(err)
		}
		if batch.IsWindowed(p.Schema) != tc.windowed || p.Config.Augment.ImgSz != 64 {
			t.Errorf("masks %q: schema %s, imgsz %d", tc.masks, p.Schema, p.Config.Augment.ImgSz)
		}
	}
	_, err := NewPlan(Request{Version: RequestVersion, BatchSize: 64}, pipeline.Config{MaxMemory: 1 << 20})
	if !errors.Is(err, pipeline.ErrMemoryLimit) || !strings.Contains(err.Error(), "over the memory limit of 1.0 MiB") {
		t.Errorf("over the limit: %v", err)
	}
}
