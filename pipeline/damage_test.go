package pipeline

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/shardfault"
)

// damagedSet writes rows as several shards of several row groups each and
// damages them: shard 0 row group 1 (flipped page bytes), one image of
// shard 1 (flipped image bytes), shard 2 (zeroed footer) and shard 3
// (truncated). It returns the directory and the skips a reader must count.
func damagedSet(t *testing.T, rows []shard.Image) (string, map[string]int64) {
	t.Helper()
	dir := t.TempDir()
	w, err := shard.Create(dir, shard.WriterOptions{ShardBytes: 24 << 10, RowGroupBytes: 6 << 10,
		Categories: []shard.Category{{ID: 1, Index: 0, Name: "a"}, {ID: 2, Index: 1, Name: "b"}, {ID: 3, Index: 2, Name: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if err := w.Write(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Close(nil)
	if err != nil {
		t.Fatal(err)
	}
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
