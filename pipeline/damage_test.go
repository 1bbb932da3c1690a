package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/testenv/shardfault"
)

// damagedSet writes rows as several shards of several row groups each and
// damages them: shard 0 row group 1 (flipped page bytes), one image of
// shard 1 (flipped image bytes), shard 2 (zeroed footer) and shard 3
// (truncated). It returns the directory and the skips a reader must count.
func damagedSet(t *testing.T, rows []shard.Image) (string, map[string]int64) {
	t.Helper()
	dir, m := writeSetManifest(t, rows)
	if len(m.Shards) < 5 {
		t.Fatalf("want at least 5 shards, got %d", len(m.Shards))
	}
	path := func(i int) string { return filepath.Join(dir, m.Shards[i].File) }
	r, err := shard.OpenShardFile(path(0), shard.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.NumRowGroups() < 2 {
		t.Fatalf("shard 0 has %d row groups, want several", r.NumRowGroups())
	}
	g1 := r.RowGroupRows(1)
	r.Close()
	if err := shardfault.FlipRowGroup(path(0), 1); err != nil {
		t.Fatal(err)
	}
	if err := shardfault.FlipImage(path(1), rows[m.Shards[0].Rows+1].Bytes); err != nil {
		t.Fatal(err)
	}
	if err := shardfault.ZeroFooter(path(2)); err != nil {
		t.Fatal(err)
	}
	if err := shardfault.Truncate(path(3)); err != nil {
		t.Fatal(err)
	}
	return dir, map[string]int64{
		SkipBadRowGroup:   g1,
		SkipImageChecksum: 1,
		SkipBadShard:      m.Shards[2].Rows + m.Shards[3].Rows,
	}
}

// Issue 16: one unreadable page aborted the whole run and flipped image
// bytes were used silently. Damage is skipped, counted by reason, and the
// run delivers every other row.
func TestDamageIsSkippedAndCounted(t *testing.T) {
	rows := synth(t, 60, 0)
	dir, want := damagedSet(t, rows)
	src, err := OpenShards(dir)
	if err != nil {
		t.Fatalf("a damaged shard made the set unreadable: %v", err)
	}
	defer src.Close()
	cfg := testConfig()
	cfg.Val, cfg.Epochs = true, 1
	l, err := New(context.Background(), src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var images int64
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatalf("the run failed on damage it should skip: %v", err)
		}
		images += rec.NumRows()
		rec.Release()
	}
	st := l.Stats()
	if !maps.Equal(st.Skipped, want) {
		t.Errorf("skipped %v, want %v", st.Skipped, want)
	}
	var bad int64
	for _, n := range want {
		bad += n
	}
	if images != int64(len(rows))-bad {
		t.Errorf("%d images delivered, want %d of %d", images, int64(len(rows))-bad, len(rows))
	}
	if s := st.Summary(); s.Total() != bad || !strings.Contains(s.String(), "image_checksum=1") {
		t.Errorf("summary %q", s)
	}
	sum := t.TempDir()
	if err := st.Summary().WriteFile(sum); err != nil {
		t.Fatal(err)
	}
}

func TestStrictFailsOnDamage(t *testing.T) {
	rows := synth(t, 60, 0)
	dir, _ := damagedSet(t, rows)
	src, err := OpenShards(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	cfg := testConfig()
	cfg.Val, cfg.Epochs, cfg.Strict = true, 1, true
	l, err := New(context.Background(), src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var failed error
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			failed = err
			break
		}
		rec.Release()
	}
	if failed == nil {
		t.Fatal("strict run over damaged shards succeeded")
	}
	msg := failed.Error()
	if !strings.Contains(msg, SkipBadRowGroup) && !strings.Contains(msg, SkipImageChecksum) && !strings.Contains(msg, SkipBadShard) {
		t.Errorf("strict error %q names no damage reason", msg)
	}
	if errors.Is(failed, context.Canceled) {
		t.Errorf("strict error is a cancellation: %v", failed)
	}
}

// Issue 30: the summary added skipped samples and filled mosaic quarters
// (a damaged partner: the sample is still delivered) into one number.
func TestSkipSummaryReportsSamplesAndQuartersApart(t *testing.T) {
	for _, tc := range []struct {
		name              string
		skipped           map[string]int64
		samples, quarters int64
		line              string
	}{
		{"nothing", nil, 0, 0, "skipped: nothing"},
		{"samples", map[string]int64{SkipBadRow: 2, "decode": 1}, 3, 0, "skipped 3 samples: bad_row=2 decode=1"},
		{"quarters", map[string]int64{PartnerPrefix + SkipBadRow: 4}, 0, 4, "skipped 0 samples; filled 4 mosaic quarters: partner_bad_row=4"},
		{"both", map[string]int64{SkipImageChecksum: 1, PartnerPrefix + SkipImageChecksum: 5, PartnerPrefix + "decode": 2}, 1, 7,
			"skipped 1 sample: image_checksum=1; filled 7 mosaic quarters: partner_decode=2 partner_image_checksum=5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := SkipSummary{Images: 10, Skipped: tc.skipped}
			if s.Samples() != tc.samples || s.Quarters() != tc.quarters {
				t.Errorf("samples %d, quarters %d; want %d and %d", s.Samples(), s.Quarters(), tc.samples, tc.quarters)
			}
			if s.String() != tc.line {
				t.Errorf("line %q, want %q", s.String(), tc.line)
			}
			dir := t.TempDir()
			if err := s.WriteFile(dir); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, SkipSummaryName))
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Images   int64            `json:"images"`
				Skipped  map[string]int64 `json:"skipped"`
				Samples  int64            `json:"samples_skipped"`
				Quarters int64            `json:"quarters_filled"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.Images != 10 || got.Samples != tc.samples || got.Quarters != tc.quarters || len(got.Skipped) != len(tc.skipped) {
				t.Errorf("%s: %s", SkipSummaryName, b)
			}
		})
	}
}

// Issue 30: a sample of a damaged row group or shard has no image id to
// report, and its skip line said image_id=0. The id is given when it is
// known (a row whose image bytes fail their checksum) and left out when
// not.
func TestSkipLogsImageIDOnlyWhenKnown(t *testing.T) {
	rows := synth(t, 60, 0)
	for i := range rows {
		rows[i].ImageID = int64(1000 + i)
	}
	dir, _ := damagedSet(t, rows)
	src, err := OpenShards(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var log syncBuffer
	cfg := testConfig()
	cfg.Val, cfg.Epochs = true, 1
	cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l, err := New(context.Background(), src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	l.Close()
	var lines int
	for _, line := range strings.Split(log.String(), "\n") {
		if !strings.Contains(line, "skipping sample") {
			continue
		}
		lines++
		if strings.Contains(line, "image_id=0 ") {
			t.Errorf("skip line with an unknown id given as 0: %s", line)
		}
		if strings.Contains(line, "reason="+SkipImageChecksum) && !strings.Contains(line, "image_id=10") {
			t.Errorf("checksum skip without its image id: %s", line)
		}
	}
	if lines == 0 {
		t.Fatal("no skip lines logged")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
