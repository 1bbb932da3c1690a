package datasets

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
)

func TestReportCountsConcurrently(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	r := &Report{Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs, &mu}, nil))}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				reason := ReasonMissingImageFile
				if i%4 == 0 {
					reason = ReasonPolygonOddLength
				}
				r.Add(&Problem{File: "f.json", Offset: int64(i), ImageID: int64(g), AnnID: int64(i), Reason: reason})
			}
		}()
	}
	wg.Wait()
	want := map[string]int64{ReasonMissingImageFile: 600, ReasonPolygonOddLength: 200}
	if got := r.Counts(); !maps.Equal(got, want) || r.Total() != 800 {
		t.Fatalf("counts %v total %d, want %v", got, r.Total(), want)
	}
	if got := r.String(); got != "missing_image_file=600 polygon_odd_length=200" {
		t.Errorf("String() = %q", got)
	}
	// Warn for the first LogPerReason of each reason; the rest at Debug,
	// which this handler drops.
	if n := strings.Count(logs.String(), "level=WARN"); n != 2*LogPerReason {
		t.Errorf("%d warnings logged, want %d", n, 2*LogPerReason)
	}
	if !strings.Contains(logs.String(), "reason=polygon_odd_length file=f.json image_id=") {
		t.Errorf("log lacks the stable keys: %s", logs.String()[:200])
	}
	var zero Report
	if zero.Total() != 0 || len(zero.Counts()) != 0 || zero.String() != "none" {
		t.Error("zero Report is not empty")
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestProblemError(t *testing.T) {
	p := &Problem{File: "a.json", Offset: 17, Where: "annotations[3].bbox", ImageID: 9, AnnID: 12, Reason: ReasonInvalidBBox, Detail: "negative size"}
	if got := p.Error(); got != "a.json byte 17 annotations[3].bbox image 9 annotation 12: invalid_bbox: negative size" {
		t.Errorf("Error() = %q", got)
	}
	q := &Problem{File: "l.txt", Offset: -1, Line: 4, ImageID: -1, AnnID: -1, Reason: ReasonInvalidLabelLine}
	if got := q.Error(); got != "l.txt:4: invalid_label_line" {
		t.Errorf("Error() = %q", got)
	}
	var r Report
	if err := r.Handle(true, p); !errors.Is(err, ErrBadInput) || r.Total() != 0 {
		t.Errorf("strict Handle: %v, counted %d", err, r.Total())
	}
	if err := r.Handle(false, p); err != nil || r.Total() != 1 {
		t.Errorf("default Handle: %v, counted %d", err, r.Total())
	}
}
