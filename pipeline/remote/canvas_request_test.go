package remote

import (
	"errors"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/pipeline"
)

// TestRequestCarriesRectAndMultiScale: the two canvas settings travel in
// a ticket to the loader's configuration and back, are left out of a
// ticket that does not set them, and a value the loader refuses is a bad
// request.
func TestRequestCarriesRectAndMultiScale(t *testing.T) {
	for _, tc := range []struct {
		ticket     string
		rect       bool
		multiScale float64
	}{
		{`{"version":1,"shards":"s","val":true,"rect":true}`, true, 0},
		{`{"version":1,"shards":"s","rect":true}`, true, 0}, // training
		{`{"version":1,"shards":"s","multi_scale":0.5}`, false, 0.5},
	} {
		r, err := ParseRequest([]byte(tc.ticket))
		if err != nil {
			t.Fatalf("%s: %v", tc.ticket, err)
		}
		cfg, err := r.Config(pipeline.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Rect != tc.rect || cfg.MultiScale != tc.multiScale {
			t.Fatalf("%s: config rect %v multi_scale %v", tc.ticket, cfg.Rect, cfg.MultiScale)
		}
		back, err := NewRequest("s", cfg)
		if err != nil {
			t.Fatal(err)
		}
		if back.Rect != r.Rect || back.MultiScale != r.MultiScale {
			t.Fatalf("NewRequest gave %+v", back)
		}
	}
	if b := string(testRequest().Marshal()); strings.Contains(b, "rect") || strings.Contains(b, "multi_scale") {
		t.Fatalf("a ticket without them names them: %s", b)
	}
	for _, bad := range []string{
		`{"version":1,"shards":"s","rect":true,"multi_scale":0.5}`,
		`{"version":1,"shards":"s","val":true,"multi_scale":0.5}`,
		`{"version":1,"shards":"s","multi_scale":1}`,
		`{"version":1,"shards":"s","multi_scale":-0.1}`,
		`{"version":1,"shards":"s","multi_scale":"big"}`,
		`{"version":1,"shards":"s","val":true,"rect":1}`,
	} {
		if _, err := ParseRequest([]byte(bad)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", bad, err)
		}
	}
}
