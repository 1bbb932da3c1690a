package cli

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/testenv/shardfault"
	"github.com/segpipe/segpipe/pipeline/remote"
)

// damagedShards converts a small COCO set into about ten shards and
// damages four: flipped page bytes, flipped image bytes, a truncated file
// and a zeroed footer. It returns the shard directory and the skips a
// validation pass (one sample per row) must count.
func damagedShards(t *testing.T) (string, map[string]int64) {
	t.Helper()
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 40)
	out := filepath.Join(tmp, "shards", "damaged")
	if code, _, errs := run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", out, "--shard-size", "2KiB"); code != ExitOK {
		t.Fatalf("convert: exit %d: %s", code, errs)
	}
	set, err := shard.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	m := set.Manifest
	if len(m.Shards) < 8 {
		t.Fatalf("%d shards, want at least 8", len(m.Shards))
	}
	r, err := set.OpenShard(3, shard.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.ReadRowGroup(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var d shard.Decoder
	var img shard.Image
	if err := d.Reset(rec); err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(0, &img); err != nil {
		t.Fatal(err)
	}
	victim := append([]byte(nil), img.Bytes...)
	rec.Release()
	r.Close()
	for _, f := range []struct {
		shard int
		fn    func(string) error
	}{
		{1, func(p string) error { return shardfault.FlipRowGroup(p, 0) }},
		{3, func(p string) error { return shardfault.FlipImage(p, victim) }},
		{5, shardfault.Truncate},
		{7, shardfault.ZeroFooter},
	} {
		if err := f.fn(set.Path(f.shard)); err != nil {
			t.Fatalf("damaging shard %d: %v", f.shard, err)
		}
	}
	first := func(i int) int64 { // rows of shard i's first row group
		return m.Shards[i].Rows // one row group a shard at this size
	}
	return out, map[string]int64{
		"bad_row_group":  first(1),
		"image_checksum": 1,
		"bad_shard":      m.Shards[5].Rows + m.Shards[7].Rows,
	}
}

// Issue 16: bench, dump and served streams exited 1 on a shard set with
// one bad page. They skip, count and go on; --strict fails.
func TestDamagedShardsThroughBenchDumpServe(t *testing.T) {
	dir, want := damagedShards(t)
	var bad int64
	for _, n := range want {
		bad += n
	}

	runDir := t.TempDir()
	code, out, errs := run(t, "bench", "--shards", dir, "--batch", "4", "--imgsz", "64", "--val", "--workers", "2", "--json", "--run-dir", runDir)
	if code != ExitOK {
		t.Fatalf("bench: exit %d\n%s\n%s", code, out, errs)
	}
	var br benchResult
	if err := json.Unmarshal([]byte(out), &br); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(br.Skipped, want) || br.Images != 40-bad {
		t.Errorf("bench: %d images, skipped %v; want %d, %v", br.Images, br.Skipped, 40-bad, want)
	}
	checkSkipFile(t, runDir, want)

	if code, out, errs := run(t, "bench", "--shards", dir, "--batch", "4", "--imgsz", "64", "--val", "--strict"); code != ExitFailure {
		t.Errorf("bench --strict: exit %d, want %d\n%s\n%s", code, ExitFailure, out, errs)
	}

	runDir = t.TempDir()
	sumFile := filepath.Join(t.TempDir(), "sum.json")
	code, out, errs = run(t, "dump", "--shards", dir, "--batch", "4", "--imgsz", "64", "--val", "--batches", "10",
		"--out", filepath.Join(t.TempDir(), "b.arrows"), "--summary", sumFile, "--run-dir", runDir)
	if code != ExitOK || !strings.Contains(out, "skipped") {
		t.Fatalf("dump: exit %d\n%s\n%s", code, out, errs)
	}
	var ds struct {
		Images  int64            `json:"images"`
		Skipped map[string]int64 `json:"skipped"`
	}
	b, _ := os.ReadFile(sumFile)
	if err := json.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(ds.Skipped, want) || ds.Images != 40-bad {
		t.Errorf("dump: %d images, skipped %v; want %d, %v", ds.Images, ds.Skipped, 40-bad, want)
	}
	checkSkipFile(t, runDir, want)

	// serve: a validation stream over the damaged set ends normally; the
	// server's shutdown summary counts the skips.
	runDir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sout, serr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"segpipe", "--log-level", "error", "serve", "--shards", filepath.Dir(dir), "--addr", "127.0.0.1:0",
			"--workers", "2", "--run-dir", runDir}, &sout, &serr)
	}()
	addr := waitAddr(t, &sout, &serr)
	c, err := remote.NewClient(remote.ClientConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Stream(ctx, remote.Request{Shards: filepath.Base(dir), BatchSize: 4, ImgSz: 64, Val: true})
	if err != nil {
		t.Fatal(err)
	}
	var images int64
	for {
		rec, err := s.Next(ctx)
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("served stream over damaged shards: %v", err)
			}
			break
		}
		images += rec.NumRows()
		rec.Release()
	}
	s.Close()
	if images != 40-bad {
		t.Errorf("served %d images, want %d", images, 40-bad)
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("serve: exit %d\n%s", code, serr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(sout.String(), "image_checksum=1") {
		t.Errorf("serve printed no skip summary:\n%s", sout.String())
	}
	checkSkipFile(t, runDir, want)
}

func checkSkipFile(t *testing.T, dir string, want map[string]int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "skipped.json"))
	if err != nil {
		t.Fatalf("run directory: %v", err)
	}
	var s struct {
		Skipped map[string]int64 `json:"skipped"`
	}
	if err := json.Unmarshal(b, &s); err != nil || !maps.Equal(s.Skipped, want) {
		t.Errorf("skipped.json %s, want %v (%v)", b, want, err)
	}
}

func waitAddr(t *testing.T, out, errs *syncBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`grpc://(127\.0\.0\.1:\d+)`)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("server did not start: %s", errs.String())
	return ""
}

// Issue 16 (item 6): train did not summarise skipped samples. It prints
// the loader's skip summary and keeps it in the run directory.
func TestTrainSummarisesSkips(t *testing.T) {
	if testing.Short() {
		t.Skip("trains an epoch")
	}
	dir, _ := damagedShards(t)
	runDir := filepath.Join(t.TempDir(), "run")
	code, out, errs := run(t, "train", "--shards", dir, "--out", runDir, "--variant", "n", "--epochs", "1", "--batch", "4",
		"--imgsz", "64", "--workers", "1", "--optimizer", "sgd", "--nbs", "8", "--warmup-epochs", "0", "--mosaic", "0",
		"--close-mosaic", "0", "--max-det", "50")
	if code != ExitOK {
		t.Fatalf("train over damaged shards: exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "skipped") || !strings.Contains(out, "image_checksum=1") {
		t.Errorf("train printed no skip summary:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(runDir, "skipped.json"))
	if err != nil {
		t.Fatalf("run directory: %v", err)
	}
	var s struct {
		Images  int64            `json:"images"`
		Skipped map[string]int64 `json:"skipped"`
	}
	if err := json.Unmarshal(b, &s); err != nil || s.Images == 0 || s.Skipped["bad_shard"] == 0 || s.Skipped["bad_row_group"] == 0 {
		t.Errorf("skipped.json %s: want images and bad_shard, bad_row_group counts (%v)", b, err)
	}
}

// Issue 30 items 1 and 2: dump over a set where nothing can be read
// wrote "10 batches (0 images)" and exited 0, and with --batch 1 one
// damaged shard gave empty batches (a trainer then fails on B = 0). A
// batch that loses every image gives way to the next; an epoch that
// delivers nothing fails, naming the shards.
func TestNothingReadableFailsAndNoBatchIsEmpty(t *testing.T) {
	dir, want := damagedShards(t)
	var bad int64
	for _, n := range want {
		bad += n
	}
	out := filepath.Join(t.TempDir(), "b.arrows")
	sumFile := filepath.Join(t.TempDir(), "sum.json")
	code, stdout, errs := run(t, "dump", "--shards", dir, "--batch", "1", "--imgsz", "64", "--val", "--batches", strconv.Itoa(int(40-bad)),
		"--out", out, "--summary", sumFile) // one epoch's batches: dump fills what it is asked
	if code != ExitOK {
		t.Fatalf("dump --batch 1: exit %d\n%s\n%s", code, stdout, errs)
	}
	var ds struct {
		Images  int64 `json:"images"`
		Batches []struct {
			Rows int64 `json:"rows"`
		} `json:"batches"`
	}
	b, _ := os.ReadFile(sumFile)
	if err := json.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	for i, bt := range ds.Batches {
		if bt.Rows == 0 {
			t.Errorf("dump --batch 1: batch %d has no rows", i)
		}
	}
	if ds.Images != 40-bad {
		t.Errorf("dump --batch 1: %d images, want the %d readable ones", ds.Images, 40-bad)
	}

	set, err := shard.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range set.Manifest.Shards {
		if err := shardfault.Truncate(set.Path(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"dump", "--shards", dir, "--batch", "4", "--imgsz", "64", "--batches", "10", "--out", out},
		{"bench", "--shards", dir, "--batch", "4", "--imgsz", "64"},
	} {
		code, stdout, errs := run(t, args...)
		if code != ExitFailure || !strings.Contains(errs, "delivered no sample") || !strings.Contains(errs, set.Manifest.Shards[0].File) {
			t.Errorf("%s over a set where nothing can be read: exit %d, want %d naming the shards\n%s\n%s", args[0], code, ExitFailure, stdout, errs)
		}
	}
}
